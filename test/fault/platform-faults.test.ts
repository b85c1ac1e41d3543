/**
 * Failure proof, the platform under Imp, on the real world of test/e2e/runner-path (two nodes, real
 * QEMU, the GitHub test server): the Kubernetes API server killed while a job runs, for less and for
 * longer than the operator's node-lost bound (every watch breaks, every write fails, no agent can
 * renew its Lease; the job itself only needs GitHub), and full node disks (for a base image, for a
 * memory snapshot's template). Each node's state dir is
 * a filesystem of its own here (ext4 on a loop device), so filling it leaves the machine's disk alone. After each
 * case the invariant checker judges I1–I6 (fault-case.ts).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, statfs } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../../src/shared/index.ts";
import { RunnerWorld, worldUnavailable, nameOf } from "../e2e/runner-path/world.ts";
import type { ImpVM } from "../../src/api/index.ts";
import type { TestJob } from "../github/server.ts";
import { jobReached, runFaultCase, type CaseContext, type FaultCase } from "./fault-case.ts";
import { clearSnapshots, serveJob, snapshotsOn, templateLeftovers, untilRestored } from "./snapshots.ts";
import { snapshotDiskReserveBytes } from "../../src/agent/snapshot/index.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (platform): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

/** The operator's default node-lost bound (src/operator/nodes: DEFAULT_NODE_LOST_AFTER_MS). */
const NODE_LOST_AFTER_MS = 40_000;

/**
 * SIGKILLs kube-apiserver (etcd keeps the data), keeps it down `downMs`, starts it again on the same
 * port; returns how long it was unreachable.
 */
async function apiServerDown(ctx: CaseContext, downMs: number): Promise<number> {
  const plane = ctx.world.plane;
  const pid = plane.state().pids["kube-apiserver"];
  assert.ok(pid !== undefined, "kube-apiserver is not running");
  ctx.faultNow();
  const killedAt = Date.now();
  process.kill(pid, "SIGKILL");
  await plane.stopApiServer(); // reaps it
  await sleep(Math.max(0, downMs - (Date.now() - killedAt)));
  await plane.startApiServer();
  return Date.now() - killedAt;
}

/** A job that runs through the outage: long enough to still be running when the API server returns. */
function jobAcrossOutage(ctx: CaseContext, name: string, seconds: number): TestJob {
  return ctx.world.queueJob(`${ctx.pool}-${name}`, [{ name: "work", run: `sleep ${seconds}; echo survived` }], ctx.labels);
}

/**
 * How the VM ended: its terminal phase as the world's watch saw it, or else as its agent logged it
 * (the watch breaks with the API server and may be re-established only after the VM was deleted).
 */
async function endOf(ctx: CaseContext, vm: ImpVM): Promise<{ phase: string; reason: string }> {
  return waitFor(`${nameOf(vm)} ended`, () => {
    const h = ctx.world.history(nameOf(vm));
    const status = h?.last.status;
    if (status?.phase === "Succeeded" || status?.phase === "Failed") return { phase: status.phase, reason: status.reason ?? "?" };
    const ended = ctx.world.nodes
      .flatMap((n) => n.agent.log().split("\n"))
      .map((l) => { try { return JSON.parse(l) as { vm?: string; msg?: string; reason?: string; succeeded?: boolean }; } catch { return undefined; } })
      .find((l) => l?.vm === `${ctx.namespace}/${nameOf(vm)}` && l.msg === "VM ended");
    return ended === undefined ? undefined : { phase: ended.succeeded === true ? "Succeeded" : "Failed", reason: ended.reason ?? "?" };
  }, { timeoutMs: 180_000, intervalMs: 250 }).catch((err: unknown) => {
    // Say what the agents and the operator last said about this VM: the wait alone says nothing.
    const about = (log: string): string[] => log.split("\n").filter((l) => l.includes(nameOf(vm))).slice(-15);
    const said = [...ctx.world.nodes.map((n) => `${n.agent.name}:\n${about(n.agent.log()).join("\n")}`), `operator:\n${about(ctx.world.operator.log()).join("\n")}`];
    throw new Error(`${nameOf(vm)} did not end (last phase seen ${ctx.world.history(nameOf(vm))?.last.status?.phase ?? "none"}):\n${said.join("\n")}`, { cause: err });
  });
}

async function outageCase(ctx: CaseContext, downMs: number): Promise<string> {
  const vm = await ctx.idleRunner();
  const job = jobAcrossOutage(ctx, "outage", Math.round(downMs / 1000) + 15);
  await ctx.world.waitForJob(job, "in_progress");
  const downFor = await apiServerDown(ctx, downMs);
  // The agents must ride the outage out. The operator may not: a leader that cannot renew its Lease
  // stops leading and exits (LeadershipLost), as a controller-runtime manager does, for its
  // Deployment to restart it; here the test restarts it, as the Deployment would.
  const deadAgents = ctx.world.nodes.filter((n) => !n.agent.running).map((n) => n.agent.name);
  assert.deepEqual(deadAgents, [], `agents died during the API server outage: ${deadAgents.join(", ")}`);
  let operator = "kept leading";
  if (!ctx.world.operator.running) {
    assert.match(ctx.world.operator.log(), /Cannot keep leading .*the lease could not be renewed/, `imp operator died during the outage, not of a lost leadership:\n${ctx.world.operator.log().split("\n").slice(-20).join("\n")}`);
    await ctx.world.operator.start({});
    operator = "lost its leadership and exited (LeadershipLost), restarted as its Deployment would";
  }
  await jobReached(job, "completed", 300_000);
  assert.equal(job.conclusion, "success", `the job across the outage concluded ${job.conclusion ?? "?"}: ${job.result?.log ?? ""}`);
  const end = await endOf(ctx, vm);
  const phase = `${end.phase}/${end.reason}`;
  // The VM ran its job to the end: ending it as lost would have been the outage corrupting state.
  assert.equal(phase, "Succeeded/Completed", `${nameOf(vm)} ended ${phase} after the API server outage`);
  const lost = ctx.world.operator.log().split("\n").filter((l) => l.includes("node lost: VM marked Failed"));
  assert.deepEqual(lost, [], "the operator marked VMs lost after the outage");
  const replacement = await ctx.idleRunner();
  return `API server down ${Math.round(downFor / 1000)} s while job ${job.name} ran on ${nameOf(vm)}; the agents stayed up and resynced, the operator ${operator}; the job concluded ${job.conclusion ?? "?"}, ${nameOf(vm)} ended ${phase}; replacement ${nameOf(replacement)} online`;
}

/** Free bytes left on each full node: far less than any base image needs. */
const LEFT_FREE = 4 << 20;
const undoFills: Array<() => Promise<void>> = [];
/** What a build in progress or a failed one leaves in the image cache: its work dirs, staging dirs and trash. */
async function halfBuilt(stateDirs: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  const walk = async (dir: string, depth: number): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const path = join(dir, e.name);
      if (!e.isDirectory()) continue;
      if (e.name.startsWith("imp-staging-")) found.push(path);
      else if (e.name === "building" || e.name === "trash") for (const x of await readdir(path).catch(() => [])) found.push(join(path, x));
      else if (depth > 0) await walk(path, depth - 1);
    }
  };
  for (const d of stateDirs) await walk(d, 4);
  return found;
}
const freeOn = async (dir: string): Promise<number> => statfs(dir).then((st) => st.bavail * st.bsize);

const cases: FaultCase[] = [
  {
    id: "apiserver-killed-job-running",
    injected: "SIGKILL of kube-apiserver (etcd keeps the data), started again 20 s later",
    where: "while a job runs on a runner VM: every watch breaks, every write and Lease renewal fails",
    run: (ctx) => outageCase(ctx, 20_000),
  },
  {
    id: "apiserver-down-past-node-lost-bound",
    injected: `SIGKILL of kube-apiserver, started again ${(NODE_LOST_AFTER_MS + 20_000) / 1000} s later (past the operator's ${NODE_LOST_AFTER_MS / 1000} s node-lost bound)`,
    where: "while a job runs: no agent could renew its Lease, yet no node was lost — the silence was the API server's",
    run: (ctx) => outageCase(ctx, NODE_LOST_AFTER_MS + 20_000),
  },
  {
    id: "node-disk-full",
    injected: `both nodes' disks filled (one file, ${LEFT_FREE >> 20} MiB left free), then freed`,
    where: "before the pool's VMs prepare: their template names a runner image no node has cached, so each node must build a base image on a full disk",
    async arm(ctx) {
      // Its own layer (random bytes), so no node can reuse a cached base image.
      const image = await ctx.world.pushRunnerVariant(`disk-full-${Date.now()}`, [{ path: "runner/ballast", content: randomBytes(1 << 20), mode: 0o644 }]);
      await ctx.world.useRunnerImage(ctx.namespace, image);
      for (const node of ctx.world.nodes) undoFills.push(await ctx.world.fillDisk(node, LEFT_FREE));
      ctx.faultNow();
    },
    async run(ctx) {
      try {
        const failed = await ctx.vm("a VM Failed on a full disk", (v) => v.status?.phase === "Failed", 240_000);
        const reason = `${failed.status?.reason ?? "?"}: ${(failed.status?.message ?? "").replace(/\s+/g, " ").slice(0, 300)}`;
        assert.equal(failed.status?.reason, "PrepareFailed", `${nameOf(failed)} failed, but not in preparation: ${reason}`);
        // A failed build must not keep what it wrote: no work dir, staging dir or trash is left behind.
        const left = await waitFor("the failed builds' files removed", async () => ((await halfBuilt(ctx.world.nodes.map((n) => n.stateDir))).length === 0 ? true : undefined), { timeoutMs: 60_000, intervalMs: 500 }).then(() => [], () => halfBuilt(ctx.world.nodes.map((n) => n.stateDir)));
        assert.deepEqual(left, [], "a failed build left files on a full disk");
        const free = await Promise.all(ctx.world.nodes.map((n) => freeOn(n.stateDir)));
        const failures = [...ctx.world.seenVms.values()].filter((h) => h.last.metadata.namespace === ctx.namespace && h.phases.includes("Failed")).length;
        while (undoFills.length > 0) await undoFills.pop()?.();
        const freedAt = Date.now();
        const vm = await ctx.idleRunner(300_000);
        const job = ctx.world.queueJob(`${ctx.pool}-after-disk-full`, [{ name: "hi", run: "echo hi" }], ctx.labels);
        await ctx.world.waitForJob(job, "completed", 300_000);
        assert.equal(job.conclusion, "success", `${job.name} concluded ${job.conclusion ?? "?"}`);
        return `${failures} VM(s) failed to prepare on the full disks (${reason}); nothing half-built was kept (no build or staging dir, no trash; free ${free.map((x) => `${(x / 2 ** 20).toFixed(1)} MiB`).join(" / ")}, the pulled layers staying cached); once the disks were freed, ${nameOf(vm)} came online ${Math.round((Date.now() - freedAt) / 1000)} s later (the pool's failure backoff included) and ${job.name} concluded ${job.conclusion ?? "?"}`;
      } finally {
        while (undoFills.length > 0) await undoFills.pop()?.();
      }
    },
  },
  {
    id: "snapshot-disk-full",
    injected: "both nodes' disks filled to just below what a template build needs (the guest's memory plus the reserve kept free for VMs), then freed",
    where: "as the VMs of a startFrom: Snapshot pool find no snapshot and their nodes would build a template",
    pool: { minIdle: 1, maxConcurrent: 2, snapshot: true },
    async arm(ctx) {
      await clearSnapshots(ctx);
      // Room for VMs to pull and boot (a busybox base, sparse disks), not for a template: a snapshot
      // may take the class's 384 MiB of memory, and a tenth of the disk stays free. 128 MiB short of
      // that, so space freed later (an earlier case's VM directories) does not make room for one.
      for (const node of ctx.world.nodes) {
        const fs = await statfs(node.stateDir);
        undoFills.push(await ctx.world.fillDisk(node, snapshotDiskReserveBytes(fs.blocks * fs.bsize) + 384 * 2 ** 20 - 128 * 2 ** 20));
      }
      ctx.faultNow();
    },
    async run(ctx) {
      try {
        const served: string[] = [];
        for (let i = 1; i <= 2; i++) {
          const one = await serveJob(ctx, `disk-full-${i}`);
          assert.equal(one.startedFrom, "Boot", `${one.job} ran in a VM that was not booted`);
          served.push(`${one.job} on ${one.runner}`);
        }
        const snapshots = (await Promise.all(ctx.world.nodes.map((n) => snapshotsOn(n)))).flat();
        assert.deepEqual(snapshots, [], "no template was built on a disk without room for it");
        assert.deepEqual(await templateLeftovers(ctx), [], "nothing of a template build was left");
        const free = await Promise.all(ctx.world.nodes.map((n) => freeOn(n.stateDir)));
        while (undoFills.length > 0) await undoFills.pop()?.();
        const restored = await untilRestored(ctx, "after-disk-freed", 300_000);
        return `with ${free.map((x) => `${(x / 2 ** 20).toFixed(0)} MiB`).join(" / ")} free, no node built a template (SnapshotNoSpace) and nothing of one was left; the jobs were served by booted VMs (${served.join(", ")}); once the disks were freed a template was built (after its backoff: 30 s, doubled by each refused build) and a job ran restored: ${restored}`;
      } finally {
        while (undoFills.length > 0) await undoFills.pop()?.();
      }
    },
  },
];

describe("failure proof: the API server under Imp", { skip: unavailable, timeout: 3_600_000, concurrency: 1 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ say: (line) => process.stdout.write(`# ${line}\n`), nodeDiskBytes: 3 * 1024 ** 3 });
  });
  after(async () => {
    while (undoFills.length > 0) await undoFills.pop()?.();
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
