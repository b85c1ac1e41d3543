/**
 * Failure proof, node side (more cases; agent-faults.test.ts has the first three): faults in
 * `imp agent` at each of its fault points, in a VM's supervisor, in the guest, and an agent that
 * stops renewing its Lease, on the real world of test/e2e/runner-path (two nodes, real QEMU, the
 * GitHub test server). After each case the invariant checker judges I1–I6 (fault-case.ts).
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { ANNOTATIONS, IMP_NODES, type ImpNode, type ImpVM } from "../../src/api/index.ts";
import { createResourceClient } from "../../src/kube/index.ts";
import { waitFor } from "../../src/shared/index.ts";
import { RunnerWorld, worldUnavailable, nameOf, type WorldNode } from "../e2e/runner-path/world.ts";
import type { TestJob } from "../github/server.ts";
import { processesMentioning } from "../harness/node-agent.ts";
import { armAgents, jobReached, jobRunsThrough, oneAgentCrashed, runFaultCase, type CaseContext, type FaultCase } from "./fault-case.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (node): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

/** The operator's default node-lost bound (src/operator/nodes: DEFAULT_NODE_LOST_AFTER_MS); `imp operator` has no flag to lower it. */
const NODE_LOST_AFTER_MS = 40_000;

/** The runner VM a job ran on (its runner is named after the VM). */
function vmOfJob(ctx: CaseContext, job: TestJob): ImpVM {
  const h = ctx.world.history(job.runnerName ?? "");
  assert.ok(h !== undefined, `job ${job.name} ran on ${job.runnerName ?? "no runner"}, not a VM this world saw`);
  return h.last;
}

/** Pids of the processes whose command line names `uid` and `program`. */
async function processesOf(uid: string, program: string): Promise<number[]> {
  const pids: number[] = [];
  for (const pid of await processesMentioning(uid)) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (cmdline.split("\0").some((arg) => arg.endsWith(program))) pids.push(pid);
  }
  return pids;
}

/** Which agents logged that their armed point fired (the plan's `@1` was used up there). */
const fired = (world: RunnerWorld, point: string): WorldNode[] => world.nodes.filter((n) => n.agent.log().split("\n").some((l) => l.includes("test fault point fired") && l.includes(point)));

const ended = (vm: ImpVM | undefined): boolean => ["Failed", "Succeeded"].includes(vm?.status?.phase ?? "");

/**
 * Waits until the world saw `name` terminal or deleted (the pool deletes a terminal VM moments
 * after it ended, so a wait on the current list can miss it); returns how it ended, for the report.
 */
async function endOf(world: RunnerWorld, name: string, timeoutMs = 180_000): Promise<string> {
  await waitFor(`${name} ended`, () => {
    const h = world.history(name);
    return h !== undefined && (h.goneAt !== undefined || h.phases.some((p) => p === "Failed" || p === "Succeeded")) ? true : undefined;
  }, { timeoutMs, intervalMs: 150 });
  return phaseOf(world, name);
}
const phaseOf = (world: RunnerWorld, name: string): string => {
  const h = world.history(name);
  return h === undefined ? "(never seen)" : `${h.last.status?.phase ?? "?"}${h.last.status?.reason === undefined ? "" : `/${h.last.status.reason}`}${h.goneAt === undefined ? "" : ", deleted"}`;
};

const cases: FaultCase[] = [
  {
    id: "agent-crash-prepare",
    injected: "agent SIGKILL (fault point agent.prepare=crash@1)",
    where: "during disk preparation: the image is in the node's cache and the VM's directory exists, its disks are not made yet (phase Preparing)",
    arm: (ctx) => armAgents(ctx.world, "agent.prepare=crash@1"),
    async run(ctx) {
      const node = await oneAgentCrashed(ctx);
      const vm = await ctx.idleRunner();
      const job = await jobRunsThrough(ctx, "after-prepare-crash");
      return `the restarted agent on ${node} found the half-prepared VM; runner ${nameOf(vm)} came online (${nameOf(vm)} is ${ctx.world.history(nameOf(vm))?.phases.join("→") ?? "?"}); ${job}`;
    },
  },
  {
    id: "agent-crash-running",
    injected: "agent SIGKILL (fault point agent.running=crash@1)",
    where: "right after the guest reported the runner workload started (local stage running, the API write to Running possibly in flight); the VM keeps running under its supervisor",
    arm: (ctx) => armAgents(ctx.world, "agent.running=crash@1"),
    async run(ctx) {
      const crashedAt = Date.now();
      const node = await oneAgentCrashed(ctx);
      const before = (await ctx.world.listVms()).filter((vm) => vm.metadata.namespace === ctx.namespace && vm.status?.nodeName === node && !ended(vm)).map(nameOf);
      const vm = await ctx.idleRunner();
      const readopted = before.includes(nameOf(vm));
      const job = await jobRunsThrough(ctx, "after-running-crash");
      return `the restarted agent on ${node} ${readopted ? `re-adopted ${nameOf(vm)} (same VM, runner online ${Math.round((Date.now() - crashedAt) / 1000)} s after the crash)` : `did not keep its VM (${before.join(", ") || "none"}); runner ${nameOf(vm)} came online`}; ${job}`;
    },
  },
  {
    id: "agent-crash-after-exit",
    injected: "agent SIGKILL (fault point agent.after-exit=crash@1)",
    where: "after the runner exited at the end of its job (its exit known to the agent), before the exit is reported to the API and before anything of the VM is freed",
    arm: (ctx) => armAgents(ctx.world, "agent.after-exit=crash@1"),
    async run(ctx) {
      await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-exits`, [{ name: "hi", run: "echo hi" }], ctx.labels);
      await jobReached(job, "completed");
      const vm = vmOfJob(ctx, job);
      const node = await oneAgentCrashed(ctx);
      const done = await endOf(ctx.world, nameOf(vm));
      const replacement = await ctx.idleRunner();
      return `job ${job.name} ${job.conclusion ?? "?"}; the agent on ${node} crashed before reporting the runner's exit; restarted, it ended ${nameOf(vm)} (${done}) and released it; replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "agent-crash-before-sealed-removal",
    injected: "agent SIGKILL (fault point teardown.before-sealed-removal=crash@1)",
    where: "in the teardown of a VM whose runner finished its job: VM terminal, its VMM, tap, directory and CID freed, its sealed setup still in its status and its teardown finalizer still there",
    arm: (ctx) => armAgents(ctx.world, "teardown.before-sealed-removal=crash@1"),
    async run(ctx) {
      await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-tears`, [{ name: "hi", run: "echo hi" }], ctx.labels);
      await jobReached(job, "completed");
      const vm = vmOfJob(ctx, job);
      const node = await waitFor("an agent crashed at its fault point", () => ctx.world.nodes.find((n) => !n.agent.running), { timeoutMs: 180_000, intervalMs: 100 });
      // The state at the point, seen before the agent comes back: the sealed setup outlives the VM's run for now.
      const sealedAtCrash = (await ctx.world.listVms()).find((v) => nameOf(v) === nameOf(vm))?.status?.setup?.sealed !== undefined;
      const left = await ctx.world.leftoversOf(node, vm.metadata.uid ?? "");
      await oneAgentCrashed(ctx);
      const replacement = await ctx.idleRunner();
      return `job ${job.name} ${job.conclusion ?? "?"} on ${nameOf(vm)}; the agent on ${node.name} crashed in its teardown with ${sealedAtCrash ? "the sealed setup still in the VM's status" : "the sealed setup already removed"} and ${left.length === 0 ? "nothing of the VM left on the node" : `on the node: ${left.join(", ")}`}; restarted, it released again (${nameOf(vm)} ${phaseOf(ctx.world, nameOf(vm))}); replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "agent-lost-ack-no-crash",
    injected: "a retryable error at the agent's fault point agent.exec-sent=fail@1 (no crash)",
    where: "after the guest answered the Exec with the one-time setup, before the agent acted on the answer (the lost acknowledgement, the agent process living on)",
    arm: (ctx) => armAgents(ctx.world, "agent.exec-sent=fail@1"),
    async run(ctx) {
      const vm = await ctx.idleRunner();
      ctx.faultNow();
      const at = fired(ctx.world, "agent.exec-sent");
      assert.ok(at.length > 0, "no agent logged that agent.exec-sent fired");
      // Disarm the agents that did not fire, so that no later VM (here or in a later case) meets it.
      for (const n of ctx.world.nodes) if (!at.includes(n)) await ctx.world.restartAgent(n, {});
      const runner = ctx.world.github.runnerNamed(nameOf(vm));
      const job = await jobRunsThrough(ctx, "after-lost-ack");
      return `the agent on ${at.map((n) => n.name).join(", ")} lost the Exec's answer, reconnected and asked the guest for the exec id instead of resending; ${nameOf(vm)} Running, its runner (id ${runner?.id ?? "?"}) came online once; ${job}`;
    },
  },
  {
    id: "supervisor-killed-job-running",
    injected: "SIGKILL of the VM's imp-supervisor process",
    where: "while the job runs (a step sleeping 600 s)",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-orphaned`, [{ name: "long", run: "sleep 600" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      const uid = vm.metadata.uid ?? "";
      const pids = await processesOf(uid, "imp-supervisor");
      assert.ok(pids.length > 0, `no imp-supervisor process names ${uid}`);
      ctx.faultNow();
      for (const pid of pids) process.kill(pid, "SIGKILL");
      const end = await endOf(ctx.world, nameOf(vm));
      await jobReached(job, "completed", 120_000).catch(() => undefined);
      const replacement = await ctx.idleRunner();
      return `killed ${pids.length} supervisor process(es); ${nameOf(vm)} ${end}; job ${job.name} ${job.status} ${job.conclusion ?? ""}; replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "guest-poweroff-job-running",
    injected: "the guest powers itself off (`poweroff -f`, busybox, from a job step; Imp's guest kernel has no CONFIG_MAGIC_SYSRQ, so a sysrq crash is impossible, and PID 1 is the guest agent itself)",
    where: "while the job runs, before the runner reports the job",
    async run(ctx) {
      await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-poweroff`, [{ name: "die", run: "sleep 2; poweroff -f; sleep 60" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      ctx.faultNow();
      const vm = vmOfJob(ctx, job);
      const end = await endOf(ctx.world, nameOf(vm));
      await jobReached(job, "completed", 120_000).catch(() => undefined);
      // Had poweroff been refused, the step would fail and the runner report the job itself: not this case.
      // A dead guest's job ends only by GitHub's lock expiring ("lost communication"), with no steps reported.
      assert.match(job.result?.log ?? "", /lost communication/, `the guest did not die: job ${job.status} ${job.conclusion ?? ""}: ${job.result?.log ?? ""}`);
      const replacement = await ctx.idleRunner();
      return `the guest of ${nameOf(vm)} died mid-job; ${nameOf(vm)} ${end}; job ${job.status} ${job.conclusion ?? ""} (${(job.result?.log ?? "").trim().split("\n").at(-1) ?? ""}); replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "agent-lease-stale",
    injected: `SIGSTOP of the agent process for ${(NODE_LOST_AFTER_MS + 15_000) / 1000} s (its Lease goes stale past the operator's ${NODE_LOST_AFTER_MS / 1000} s node-lost bound), then SIGCONT`,
    where: "while a job runs on a VM of that agent (a step sleeping 600 s); the VM, its supervisor and the runner keep running",
    // The VM's runner keeps its job while the agent is stopped, and a busy registration cannot be removed
    // (422), so I3 settles only once the resumed agent tore the VM down and GitHub's job lock expired.
    bounds: { I3: 180_000, I4: 120_000, I5: 180_000 },
    async run(ctx) {
      await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-stale`, [{ name: "long", run: "sleep 600" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      const vm = vmOfJob(ctx, job);
      const node = ctx.world.nodeOf(vm);
      const pid = node.agent.pid;
      assert.ok(pid !== undefined, `${node.agent.name} is not running`);
      ctx.faultNow();
      const stoppedAt = Date.now();
      process.kill(pid, "SIGSTOP");
      let lost: ImpVM | undefined;
      let lostMs = 0;
      let sealedGone = false;
      try {
        lost = await ctx.vm(`${nameOf(vm)} Failed/NodeLost`, (v) => nameOf(v) === nameOf(vm) && v.status?.phase === "Failed" && v.status.reason === "NodeLost", NODE_LOST_AFTER_MS + 60_000).catch(() => undefined);
        lostMs = Date.now() - stoppedAt;
        sealedGone = await waitFor(`${nameOf(vm)}'s sealed setup removed`, async () => {
          const now = (await ctx.world.listVms()).find((v) => nameOf(v) === nameOf(vm));
          return now === undefined || (now.status?.setup?.sealed === undefined && now.status?.inputs === undefined) ? true : undefined;
        }, { timeoutMs: 30_000, intervalMs: 250 }).catch(() => false);
        // Keep the agent stopped a little past the bound, so the operator acts on a node still silent.
        const rest = NODE_LOST_AFTER_MS + 15_000 - (Date.now() - stoppedAt);
        if (rest > 0) await new Promise((r) => setTimeout(r, rest));
      } finally {
        process.kill(pid, "SIGCONT");
      }
      assert.ok(lost !== undefined, `${nameOf(vm)} was not marked Failed/NodeLost: ${phaseOf(ctx.world, nameOf(vm))}`);
      assert.ok(sealedGone, `${nameOf(vm)}'s sealed setup outlived the NodeLost VM while the agent was stopped`);
      const replacement = await ctx.idleRunner();
      const gone = await waitFor(`${nameOf(vm)}'s VMM gone from ${node.name}`, async () => ((await processesOf(vm.metadata.uid ?? "", "qemu-system-x86_64")).length === 0 ? true : undefined), { timeoutMs: 120_000, intervalMs: 500 }).catch(() => false);
      return `the operator marked ${nameOf(vm)} Failed/NodeLost while ${node.name}'s agent was stopped (seen ${Math.round(lostMs / 1000)} s after SIGSTOP), removed its sealed setup and, once its runner was no longer busy, its registration; replacement ${nameOf(replacement)} online on ${replacement.status?.nodeName ?? "?"}; after SIGCONT the agent ${gone ? "tore the lost VM's VMM down and did not boot it again" : "still had the lost VM's VMM running"}; job ${job.status} ${job.conclusion ?? ""}`;
    },
  },
  {
    id: "node-drained-mid-job",
    injected: "kubectl cordon of the node a job runs on (what kubectl drain does first; its Pod evictions do not reach VMs), uncordoned at the end",
    where: "while a job runs on a VM there (a step sleeping 20 s) and the pool keeps one idle runner ready",
    async run(ctx) {
      await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-drain`, [{ name: "work", run: "sleep 20; echo finished on a drained node" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      const vm = vmOfJob(ctx, job);
      const node = ctx.world.nodeOf(vm);
      const impNodes = createResourceClient<ImpNode>(ctx.world.plane.kubeConfig, IMP_NODES);
      const annotation = async (key: string): Promise<string | undefined> => (await impNodes.get({ name: node.name })).metadata.annotations?.[key];
      ctx.faultNow();
      const cordonedAt = Date.now();
      await ctx.world.kubectl(["cordon", node.name]);
      try {
        // Busy 1 + minIdle 1: the pool's idle runner must be on the other node, whatever was idle here was replaced.
        const elsewhere = await ctx.vm(`an idle runner on a node other than ${node.name}`, (v) => v.status?.nodeName !== node.name && v.status?.phase === "Running" && ctx.world.github.runnerNamed(nameOf(v))?.status === "online" && ctx.world.github.runnerNamed(nameOf(v))?.busy === false, 300_000);
        await jobReached(job, "completed");
        assert.equal(job.conclusion, "success", `the job on the cordoned node finished: ${job.result?.log ?? ""}`);
        const vmEnd = await endOf(ctx.world, nameOf(vm));
        assert.match(vmEnd, /^Succeeded/, "its VM ended by itself, not by the drain (the grace is 1 h)");
        const drainedAt = await waitFor(`${node.name} reports drained`, () => annotation(ANNOTATIONS.drained), { timeoutMs: 180_000, intervalMs: 250 });
        const drainedAfter = Date.parse(drainedAt) - cordonedAt;
        const onNode = (await ctx.world.listVms()).filter((v) => v.status?.nodeName === node.name && !ended(v) && v.metadata.deletionTimestamp === undefined);
        assert.deepEqual(onNode.map(nameOf), [], `no live VM left on ${node.name}`);
        await ctx.world.kubectl(["uncordon", node.name]);
        await waitFor("the drain marks cleared", async () => ((await annotation(ANNOTATIONS.drainStarted)) === undefined && (await annotation(ANNOTATIONS.drained)) === undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });
        return `${job.name} ${job.conclusion ?? "?"} on ${nameOf(vm)} (${node.name}, cordoned mid-job); its VM ended ${vmEnd}; idle runner ${nameOf(elsewhere)} online on ${elsewhere.status?.nodeName ?? "?"}; ${node.name} reported drained ${Math.round(drainedAfter / 1000)} s after the cordon with no VM left; uncordoned, its drain marks were cleared`;
      } finally {
        await ctx.world.kubectl(["uncordon", node.name]).catch(() => undefined);
      }
    },
  },
  {
    id: "node-vanishes-mid-job",
    injected: "the machine of a busy node dies: SIGKILL of its agent and of every VM process on it (supervisors, QEMU), and its core Node is deleted; later it comes back (Node re-created, agent restarted)",
    where: "while a job runs on a VM there (a step sleeping 600 s)",
    // The dead runner's job ends only by GitHub's job lock expiring; its registration can go once it does.
    bounds: { I3: 180_000 },
    async run(ctx) {
      await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-vanish`, [{ name: "long", run: "sleep 600" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      const vm = vmOfJob(ctx, job);
      const node = ctx.world.nodeOf(vm);
      const onNode = (await ctx.world.listVms()).filter((v) => v.status?.nodeName === node.name);
      ctx.faultNow();
      const diedAt = Date.now();
      await node.agent.kill();
      let killed = 0;
      for (const v of onNode) {
        for (const program of ["imp-supervisor", "qemu-system-x86_64"]) {
          for (const pid of await processesOf(v.metadata.uid ?? "", program)) {
            process.kill(pid, "SIGKILL");
            killed++;
          }
        }
      }
      await ctx.world.kubectl(["delete", "node", node.name, "--wait=false"]);
      // The world's own waits insist every agent runs; this one is dead on purpose, so wait on the API directly.
      const vmWhere = (what: string, check: (v: ImpVM) => boolean, timeoutMs: number): Promise<ImpVM> =>
        waitFor(what, async () => (await ctx.world.listVms()).find((v) => v.metadata.namespace === ctx.namespace && check(v)), { timeoutMs, intervalMs: 200 });
      const lost = await vmWhere(`${nameOf(vm)} Failed/NodeLost`, (v) => nameOf(v) === nameOf(vm) && v.status?.phase === "Failed" && v.status.reason === "NodeLost", 60_000);
      const lostAfter = Date.now() - diedAt;
      assert.equal(lost.status?.message, `Node ${node.name} was deleted`);
      await vmWhere(`${nameOf(vm)}'s sealed setup removed by the operator (its agent is dead)`, (v) => nameOf(v) === nameOf(vm) && v.status?.setup?.sealed === undefined && v.status?.inputs === undefined, 30_000);
      const replacement = await vmWhere("an idle runner on the other node", (v) => v.status?.nodeName !== node.name && v.status?.phase === "Running" && ctx.world.github.runnerNamed(nameOf(v))?.status === "online" && ctx.world.github.runnerNamed(nameOf(v))?.busy === false, 300_000);
      // The machine comes back: its Node object, then its agent, which sweeps what the dead VMs left.
      await ctx.world.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "Node", metadata: { name: node.name, labels: { "imp.dev/test-node": "true" } } }));
      await node.agent.start({});
      await jobReached(job, "completed", 180_000);
      return `${killed} VM process(es) and the agent of ${node.name} killed, its Node deleted: ${nameOf(vm)} Failed/NodeLost ${Math.round(lostAfter / 1000)} s later (${lost.status?.message ?? ""}), its sealed setup removed by the operator; replacement ${nameOf(replacement)} online on ${replacement.status?.nodeName ?? "?"}; the job's fate on GitHub: ${job.status} ${job.conclusion ?? ""} (${(job.result?.log ?? "").trim().split("\n").at(-1) ?? ""}); the machine back, its agent swept what was left`;
    },
  },
  {
    id: "agent-slow-boot",
    injected: "a 20 s delay at the agent's fault point agent.boot (agent.boot=delay:20000@1)",
    where: "during boot: the VMM is started, the agent waits before connecting to the guest agent (its hello)",
    arm: (ctx) => armAgents(ctx.world, "agent.boot=delay:20000@1"),
    async run(ctx) {
      ctx.faultNow();
      const vm = await ctx.idleRunner(240_000);
      const h = ctx.world.history(nameOf(vm));
      // Disarm both agents (a delay armed in an agent that did not boot a VM here would act in a later case).
      for (const n of ctx.world.nodes) if (fired(ctx.world, "agent.boot").includes(n) === false) await ctx.world.restartAgent(n, {});
      const job = await jobRunsThrough(ctx, "after-slow-boot");
      return `${nameOf(vm)} came online ${h === undefined ? "?" : Math.round((Date.now() - h.firstSeenAt) / 1000)} s after it was created despite the delay; ${job}`;
    },
  },
];

describe("failure proof: more node-side faults (agent points, supervisor, guest, stale Lease)", { skip: unavailable, timeout: 3_600_000, concurrency: 1 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await world?.dispose();
  });
  for (const c of cases) {
    it(`${c.id}: ${c.injected} ${c.where}`, async () => {
      const started = Date.now();
      const result = await runFaultCase(world, suite, c);
      process.stdout.write(`# ${c.id}: ${result.impDid}; recovered in ${result.recoverMs} ms; case took ${Math.round((Date.now() - started) / 1000)} s\n`);
    });
  }
});
