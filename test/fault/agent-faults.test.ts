/**
 * Failure proof, node side: faults in `imp agent`, its VMMs and supervisors, at each handoff of the
 * runner path, on the real world of test/e2e/runner-path (two nodes, real QEMU, the GitHub test
 * server). After each case the invariant checker judges I1–I6 (test/fault/fault-case.ts).
 */
import assert from "node:assert/strict";
import { readFile, stat, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { RunnerWorld, worldUnavailable, nameOf } from "../e2e/runner-path/world.ts";
import { DEFAULT_MAX_CONSOLE_BYTES, supervisedConsoleBound } from "../../src/agent/index.ts";
import { waitFor } from "../../src/shared/index.ts";
import type { ImpVM } from "../../src/api/index.ts";
import { processesMentioning } from "../harness/node-agent.ts";
import { armAgents, jobRunsThrough, oneAgentCrashed, runFaultCase, type CaseContext, type FaultCase } from "./fault-case.ts";
import { aSnapshot, clearSnapshots, snapshotsOn, templateLeftovers, untilRestored } from "./snapshots.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (agent): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

const cases: FaultCase[] = [
  {
    id: "snapshot-damaged",
    injected: "every node's memory snapshot of the pool's template overwritten (its device state) and truncated (its RAM file)",
    where: "between jobs of a startFrom: Snapshot pool, after its VMs were being restored",
    pool: { minIdle: 1, maxConcurrent: 2, snapshot: true },
    arm: clearSnapshots,
    async run(ctx) {
      await ctx.idleRunner();
      const before = await untilRestored(ctx, "before");
      ctx.faultNow();
      for (const node of ctx.world.nodes) {
        for (const key of await snapshotsOn(node)) {
          await writeFile(join(node.stateDir, "snapshots", key, "state"), "not a device state");
          await truncate(join(node.stateDir, "snapshots", key, "memory"), 4096);
        }
      }
      const after = await untilRestored(ctx, "after");
      return `before: ${before}; after the damage every job was served, the damaged snapshots discarded (VMs booted) and rebuilt: ${after}`;
    },
  },
  {
    id: "agent-crash-snapshot-save",
    injected: "agent SIGKILL (fault point agent.snapshot-save=crash)",
    where: "while a memory snapshot is written: the template's RAM file and device state are on disk, the snapshot not yet published",
    pool: { minIdle: 1, maxConcurrent: 2, snapshot: true },
    async arm(ctx) {
      await clearSnapshots(ctx);
      await armAgents(ctx.world, "agent.snapshot-save=crash@1");
    },
    async run(ctx) {
      const node = await oneAgentCrashed(ctx);
      const served = await untilRestored(ctx, "after-crash");
      // Builds may run now (the other node's, a new one): each ends within its bound, and what the
      // crash left is the restarted agent's sweep's; none may remain.
      let left: string[] = [];
      await waitFor("no template build's leftovers on any node", async () => ((left = await templateLeftovers(ctx)).length === 0 ? true : undefined), { timeoutMs: 300_000, intervalMs: 500 })
        .catch(() => assert.fail(`template builds left: ${left.join(", ")}`));
      return `the agent on ${node} died with its template saved but not published; restarted, its sweep removed the template VM and the half-built snapshot; jobs served, then restored: ${served}`;
    },
  },
  {
    id: "template-boot-fails",
    injected: "fault point agent.template=fail on every agent (its first template build)",
    where: "as a node starts the template VM of a startFrom: Snapshot pool",
    pool: { minIdle: 1, maxConcurrent: 2, snapshot: true },
    async arm(ctx) {
      await clearSnapshots(ctx);
      await armAgents(ctx.world, "agent.template=fail@1");
    },
    async run(ctx) {
      const vm = await ctx.idleRunner();
      ctx.faultNow();
      assert.equal(vm.status?.startedFrom, "Boot");
      // A failed build is tried again after 30 s (then 60 s, …): jobs keep being served by booted VMs meanwhile.
      const served = await untilRestored(ctx, "after-failed-template");
      return `the failed templates made no snapshot; ${nameOf(vm)} and the next VMs booted and served their jobs until a template was built: ${served}`;
    },
  },
  {
    id: "restore-hangs",
    injected: "fault point agent.restore=hang on every agent",
    where: "as a VM of a startFrom: Snapshot pool starts its restore, with a snapshot on its node",
    pool: { minIdle: 1, maxConcurrent: 2, snapshot: true },
    async run(ctx) {
      await ctx.idleRunner();
      await aSnapshot(ctx);
      await armAgents(ctx.world, "agent.restore=hang@1");
      ctx.faultNow();
      let job: string;
      let vm: ImpVM;
      let served: string;
      try {
        job = await jobRunsThrough(ctx, "hung-restore");
        // The job's VM went; its replacement's restore hangs until its deadline (60 s), then it boots.
        vm = await ctx.vm("a replacement that came up after its restore hung", (v) => v.status?.phase === "Running" && v.status.startedFrom !== undefined && Date.parse(v.status.phaseTimestamps?.booting ?? "") - Date.parse(v.status.phaseTimestamps?.preparing ?? "") >= 60_000, 300_000);
        assert.equal(vm.status?.startedFrom, "Boot");
        served = await jobRunsThrough(ctx, "after-hung-restore");
      } finally {
        await armAgents(ctx.world, "");
      }
      return `${job}; the next VM's restore hung and was ended by its deadline, and it booted instead (${nameOf(vm)}, preparing → booting ${((Date.parse(vm.status?.phaseTimestamps?.booting ?? "") - Date.parse(vm.status?.phaseTimestamps?.preparing ?? "")) / 1000).toFixed(1)} s); ${served}`;
    },
  },
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
  {
    id: "vmm-oom-job-running",
    injected: "the VM's memory cgroup limit lowered to what QEMU uses + 32 MiB, then the job fills a 150 MiB buffer of guest RAM",
    where: "while the job runs: QEMU's memory cgroup reaches its limit and the kernel's OOM killer ends QEMU",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const gate = jobGate(ctx, "oom");
      // The job waits at a barrier until the limit is lowered, then makes its VMM grow: busybox dd
      // allocates and fills a 150 MiB buffer per block, pages the guest had never touched.
      const fill = `${gate.wait}
echo "limit lowered; filling"
dd if=/dev/zero of=/dev/null bs=150M count=2
dd if=/dev/zero of=/dev/null bs=150M count=2
echo "still alive after filling"
sleep 600`;
      const job = ctx.world.queueJob(`${ctx.pool}-oom`, [{ name: "fill", run: fill }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      const [qemu] = await processesMentioning(vm.metadata.uid ?? "", "qemu");
      assert.ok(qemu !== undefined, `QEMU of ${nameOf(vm)} is running`);
      const cgroup = await memoryCgroupOf(qemu);
      const usage = Number(await readFile(join(cgroup, "memory.usage_in_bytes"), "utf8"));
      const limit = usage + 32 * 1024 * 1024;
      await writeFile(join(cgroup, "memory.limit_in_bytes"), String(limit));
      ctx.faultNow();
      await gate.open();
      const ended = await ctx.vm("the VM ended OOMKilled", (v) => nameOf(v) === nameOf(vm) && v.status?.phase === "Failed", 180_000);
      assert.equal(ended.status?.reason, "OOMKilled", `${nameOf(vm)} ended for its memory: ${JSON.stringify(ended.status)}`);
      assert.match(ended.status?.message ?? "", /memory limit was reached.*limit \d+ MiB.*peak \d+ MiB/, "the message says the limit and the peak");
      const replacement = await ctx.idleRunner();
      return `QEMU of ${nameOf(vm)} used ${Math.round(usage / 1048576)} MiB; with its limit at ${Math.round(limit / 1048576)} MiB the job's fill got it OOM-killed; the VM ended Failed/OOMKilled: "${ended.status?.message ?? ""}"; replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "console-flood-no-agent",
    injected: "the job writes to the serial console without end while the node's agent is stopped",
    where: "while the job runs and no agent watches its VM (an upgrade, a crash): only the VM's supervisor is left to bound what it writes to the node's disk",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const node = ctx.world.nodes.find((n) => n.name === vm.status?.nodeName);
      assert.ok(node !== undefined, `the node of ${nameOf(vm)}`);
      const uid = vm.metadata.uid ?? "";
      const gate = jobGate(ctx, "flood");
      // The job floods only once the agent is gone (a barrier the test passes after stopping it).
      const flood = `${gate.wait}
while :; do echo "flooding the console while no agent watches, one line after another" > /dev/console; done`;
      const job = ctx.world.queueJob(`${ctx.pool}-flood`, [{ name: "flood", run: flood }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      await node.agent.stop();
      await gate.open();
      const floodAt = Date.now();
      await waitFor("the flooding VM's QEMU ended with no agent running", async () => ((await processesMentioning(uid, "qemu")).length === 0 ? true : undefined), { timeoutMs: 600_000, intervalMs: 500 });
      const serialLog = join(node.stateDir, "vms", uid, "vmm", "serial.log");
      const size = (await stat(serialLog)).size;
      assert.ok(size > DEFAULT_MAX_CONSOLE_BYTES, `the job did flood: ${size} bytes`);
      const bound = supervisedConsoleBound(DEFAULT_MAX_CONSOLE_BYTES);
      assert.ok(size > bound && size <= bound + 2 * 1024 * 1024, `the console log stopped near its supervisor's bound with no agent: ${size} bytes, bound ${bound}`);
      // The supervisor writes exit.json (atomically) after it reaped QEMU: on a loaded machine that
      // is after QEMU's process is gone.
      const exitPath = join(node.stateDir, "vms", uid, "supervised", "qemu", "exit.json");
      const exit = await waitFor("QEMU's supervisor wrote exit.json", async () => readFile(exitPath, "utf8").then((text) => JSON.parse(text) as { signal?: string; fileBound?: { bytes: number; maxBytes: number } }, () => undefined), { timeoutMs: 60_000, intervalMs: 200 });
      assert.equal(exit.signal, "SIGKILL", `QEMU's supervisor recorded the kill: ${JSON.stringify(exit)}`);
      assert.equal(exit.fileBound?.maxBytes, bound, `for the console's bound: ${JSON.stringify(exit)}`);
      const floodMs = Date.now() - floodAt;
      // Recovery is judged from the agent's return: until then only the supervisor could act, and
      // what it did is checked above; how long the flood took is the emulated UART's speed.
      await node.agent.start();
      ctx.faultNow();
      // An agent away past the Lease's bound (40 s) makes the operator declare the node lost first;
      // otherwise the returning agent reads why QEMU died. Either way the VM ends Failed and goes.
      const ended = await ctx.vm("the VM ended", (v) => nameOf(v) === nameOf(vm) && v.status?.phase === "Failed", 180_000);
      if (ended.status?.reason !== "NodeLost") {
        assert.equal(ended.status?.reason, "GuestMisbehaved", JSON.stringify(ended.status));
        assert.match(ended.status?.message ?? "", /serial console, over the \d+-byte limit.*supervisor killed the VMM.*while no agent watched/, "the message says what happened");
      }
      const replacement = await ctx.idleRunner();
      return `with the agent on ${node.name} stopped, the job flooded the console; after ${Math.round(floodMs / 1000)} s the VM's supervisor killed QEMU at ${size} bytes of serial.log (its bound ${bound}: the agent's ${DEFAULT_MAX_CONSOLE_BYTES} plus 4 MiB; exit.json: ${exit.fileBound?.bytes ?? "?"} bytes seen); ${nameOf(vm)} ended Failed/${ended.status?.reason ?? "?"} ("${ended.status?.message ?? ""}"); replacement ${nameOf(replacement)} online`;
    },
  },
];

/**
 * A gate the job waits at (a barrier on the GitHub test server, which its VM reaches) until the test
 * opens it: the job's fault starts exactly after the test's own step, without a sleep.
 */
function jobGate(ctx: CaseContext, name: string): { wait: string; open(): Promise<void> } {
  const barrier = `${ctx.world.github.url}/_imp-test/control/barriers/${ctx.pool}-${name}-${Date.now()}`;
  return {
    wait: `n=0; until [ -n "$(wget -q -O - --header 'content-type: application/json' --post-data '{"parties":2,"party":"job"}' '${barrier}' 2>/dev/null)" ]; do n=$((n+1)); [ $n -lt 30 ] || exit 9; done`,
    async open() {
      const go = await fetch(barrier, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ parties: 2, party: "test" }) });
      assert.equal(go.status, 200, "the job was waiting at the barrier");
    },
  };
}

/** The memory cgroup directory of a process (cgroup v1's memory hierarchy, or the v2 tree). */
async function memoryCgroupOf(pid: number): Promise<string> {
  const lines = (await readFile(`/proc/${pid}/cgroup`, "utf8")).split("\n");
  const v1 = lines.find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  if (v1 !== undefined) return join("/sys/fs/cgroup/memory", v1.slice(v1.lastIndexOf(":") + 1));
  const v2 = lines.find((l) => l.startsWith("0::"));
  if (v2 === undefined) throw new Error(`no memory cgroup for ${pid}: ${lines.join(" | ")}`);
  return join("/sys/fs/cgroup", v2.slice(3));
}

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
