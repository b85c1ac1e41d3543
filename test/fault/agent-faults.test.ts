/**
 * Failure proof, node side: faults in `imp agent`, its VMMs and supervisors, at each handoff of the
 * runner path, on the real world of test/e2e/runner-path (two nodes, real QEMU, the GitHub test
 * server). After each case the invariant checker judges I1–I6 (test/fault/fault-case.ts).
 */
import { after, before, describe, it } from "node:test";
import { RunnerWorld, worldUnavailable, nameOf } from "../e2e/runner-path/world.ts";
import { processesMentioning } from "../harness/node-agent.ts";
import { armAgents, jobRunsThrough, oneAgentCrashed, runFaultCase, type FaultCase } from "./fault-case.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (agent): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

const cases: FaultCase[] = [
  {
    id: "agent-crash-exec-sent",
    injected: "agent SIGKILL (fault point agent.exec-sent=crash)",
    where: "after the exec with the one-time setup was sent, before the guest's acknowledgement was read (the lost acknowledgement)",
    arm: (ctx) => armAgents(ctx.world, "agent.exec-sent=crash@1"),
    async run(ctx) {
      const node = await oneAgentCrashed(ctx);
      const vm = await ctx.idleRunner();
      const job = await jobRunsThrough(ctx, "after-lost-ack");
      return `the restarted agent on ${node} re-adopted ${nameOf(vm)}, asked the guest for the exec id and did not resend the setup; the runner came online once; ${job}`;
    },
  },
  {
    id: "agent-crash-boot",
    injected: "agent SIGKILL (fault point agent.boot=crash)",
    where: "during boot: the VMM is started, the guest has not said hello",
    arm: (ctx) => armAgents(ctx.world, "agent.boot=crash@1"),
    async run(ctx) {
      const node = await oneAgentCrashed(ctx);
      const vm = await ctx.idleRunner();
      return `the restarted agent on ${node} found the half-booted VM; runner ${nameOf(vm)} came online (a re-adopted or replacement VM)`;
    },
  },
  {
    id: "vmm-killed-job-running",
    injected: "SIGKILL of the VM's QEMU process",
    where: "while the job runs",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-killed`, [{ name: "long", run: "sleep 600" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      const pids = await processesMentioning(vm.metadata.uid ?? "", "qemu");
      ctx.faultNow();
      for (const pid of pids) process.kill(pid, "SIGKILL");
      const ended = await ctx.vm("the killed VM ended", (v) => nameOf(v) === nameOf(vm) && ["Failed", "Succeeded"].includes(v.status?.phase ?? ""), 120_000).catch(() => undefined);
      const replacement = await ctx.idleRunner();
      return `${nameOf(vm)} ended ${ended?.status?.phase ?? "(deleted)"} ${ended?.status?.reason ?? ""}; killed ${pids.length} QEMU process(es); replacement ${nameOf(replacement)} online`;
    },
  },
];

describe("failure proof: agent, VMM and supervisor faults", { skip: unavailable, timeout: 3_600_000, concurrency: 1 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await world?.dispose();
  });
  for (const c of cases) {
    it(`${c.id}: ${c.injected} ${c.where}`, async () => {
      const result = await runFaultCase(world, suite, c);
      process.stdout.write(`# ${c.id}: ${result.impDid}; recovered in ${result.recoverMs} ms\n`);
    });
  }
});
