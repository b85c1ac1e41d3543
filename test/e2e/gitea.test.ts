/**
 * A real forge with its real runner: Gitea 1.27.3 and gitea-runner v1.0.8 inside Imp microVMs, on
 * the real runner path (control plane, `imp operator`, two `imp agent`s, registry, QEMU). The
 * scenario (runner-path/gitea-scenario.ts, also `npm run demo -- --forge gitea`): a Gitea pool's VM
 * registers its runner from a sealed `.runner`, a pushed workflow (several steps, an env var, a
 * clone, a local action) runs in it, its log comes from Gitea's API, the VM ends and is replaced.
 * Then demand: a pool scaled to zero served from Gitea's queue listing, and one served from Gitea's
 * own workflow_job webhook, signed with the pool's secret; on each, the finished job re-run at zero.
 * Last, pools whose class starts from a memory snapshot (`startFrom: Snapshot`): on GitHub and on
 * Gitea, jobs go on until one runs in a VM restored from its node's template, as itself.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GiteaJobView } from "../gitea/gitea-server.ts";
import { checks } from "./runner-path/scenario.ts";
import { giteaPoolComesOnline, giteaVmReplaced, giteaWorkflowRuns } from "./runner-path/gitea-scenario.ts";
import { giteaWorldUnavailable, NAMESPACE, RunnerWorld } from "./runner-path/world.ts";

const unavailable = await giteaWorldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# gitea e2e: cannot run on this machine: ${unavailable}\n`);


describe("Gitea Actions end to end: the real runner in a microVM", { skip: unavailable, timeout: 1_200_000 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ gitea: true, say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await world?.dispose();
  });

  it("a pushed workflow runs in a VM with the real gitea-runner; its log is on Gitea; the VM goes and is replaced", async () => {
    const check = checks((what) => process.stdout.write(`# ✓ ${what}\n`));
    const { vm } = await giteaPoolComesOnline(world, check);
    const { log } = await giteaWorkflowRuns(world, vm, check);
    process.stdout.write(log.replace(/^/gm, "#   "));
    await giteaVmReplaced(world, vm, check);
  });

  it("minIdle 0: Gitea's queue makes one VM for a job; once the job is taken its demand is gone, and nothing is left running", async () => {
    const gitea = world.gitea;
    assert.ok(gitea !== undefined);
    await gitea.createRepo("acme", "cold");
    await gitea.putFile("acme", "cold", ".gitea/workflows/ci.yml", "on: [push]\njobs:\n  cold:\n    runs-on: imp-cold\n    steps:\n      - run: echo cold start\n");
    await world.applyGiteaPool("cold", { minIdle: 0, maxConcurrent: 2, labels: ["imp-cold"] }, NAMESPACE, "acme/cold");
    const job = await world.waitUntil("the cold job completed", async () => (await gitea.jobs("acme", "cold")).find((j) => j.status === "completed"), 300_000, 250);
    assert.equal(job.conclusion, "success");
    const vms = await world.waitUntil("the pool back to nothing: no demand, no live VM", async () => {
      const pool = await world.pools.get({ namespace: NAMESPACE, name: "cold" });
      const live = (await world.listVms("cold")).filter((vm) => !["Succeeded", "Failed"].includes(vm.status?.phase ?? ""));
      return pool.status?.queuedJobs === 0 && pool.status.desired === 0 && live.length === 0 ? [...world.seenVms.keys()].filter((n) => n.startsWith("cold-")) : undefined;
    }, 180_000, 250);
    assert.equal(vms.length, 1, `one VM for one job: ${vms.map((n) => world.describeVm(n)).join(", ")}`);

    // Re-run on the pool scaled to zero, with no webhook: Gitea's queue listing alone must find it.
    await gitea.api("POST", `/repos/acme/cold/actions/runs/${job.run_id}/rerun`);
    const rerun = await world.waitUntil("the re-run completed", async () => (await gitea.jobs("acme", "cold")).find((j) => j.run_id === job.run_id && (j.run_attempt ?? 1) >= 2 && j.status === "completed"), 300_000, 250);
    assert.equal(rerun.conclusion, "success");
    assert.notEqual(rerun.id, job.id, "Gitea re-runs a job as a new job");
    const after = [...world.seenVms.keys()].filter((n) => n.startsWith("cold-"));
    assert.equal(after.length, 2, `one more VM for the re-run: ${after.join(", ")}`);
  });

  it("a webhook pool (minIdle 0): Gitea's signed workflow_job delivery orders the job's VM, not the next listing", async () => {
    const gitea = world.gitea;
    assert.ok(gitea !== undefined);
    await gitea.createRepo("acme", "pushed");
    const hook = await world.hookGitea("acme", "pushed");
    await world.applyGiteaPool("pushed", { minIdle: 0, maxConcurrent: 2, labels: ["imp-pushed"], webhook: true }, NAMESPACE, "acme/pushed");
    // Its first listing (at once, nothing queued) is over once the pool has a status: from then on
    // only a delivery can bring this job's demand before the backstop listing 30 s later.
    await world.waitUntil("the webhook pool reconciled", async () => ((await world.pools.get({ namespace: NAMESPACE, name: "pushed" })).status?.observedGeneration !== undefined ? true : undefined), 60_000, 250);
    await gitea.putFile("acme", "pushed", ".gitea/workflows/ci.yml", "on: [push]\njobs:\n  pushed:\n    runs-on: imp-pushed\n    steps:\n      - run: echo pushed by a webhook\n");
    const job = await world.waitUntil("the pushed job completed", async () => (await gitea.jobs("acme", "pushed")).find((j) => j.status === "completed"), 300_000, 250);
    assert.equal(job.conclusion, "success");
    const about = (line: string): boolean => line.includes(`"${NAMESPACE}/pushed"`) && line.includes(`"jobId":${job.id},`);
    const said = world.operator.log().split("\n").filter(about);
    assert.ok(said.some((l) => l.includes("a queued delivery verified: the forge says the job waits")), `the operator counted the job from Gitea's delivery (hook ${hook}); it said about job ${job.id}:\n${said.join("\n")}`);
    assert.ok(!said.some((l) => l.includes("found by listing")), `no listing found the job before the delivery did:\n${said.join("\n")}`);
    const vms = await world.waitUntil("the pool back to nothing", async () => {
      const pool = await world.pools.get({ namespace: NAMESPACE, name: "pushed" });
      const live = (await world.listVms("pushed")).filter((vm) => !["Succeeded", "Failed"].includes(vm.status?.phase ?? ""));
      return pool.status?.queuedJobs === 0 && live.length === 0 ? [...world.seenVms.keys()].filter((n) => n.startsWith("pushed-")) : undefined;
    }, 180_000, 250);
    assert.equal(vms.length, 1, `one VM for one job: ${vms.map((n) => world.describeVm(n)).join(", ")}`);

    // The job re-run on the pool scaled to zero (the stall ARC fleets hit: a re-run's demand taken
    // for a replay of the finished job). Gitea 1.27 re-runs it as a new job, attempt 2 of the run.
    const logBefore = world.operator.log().length;
    const rerunAt = Date.now();
    // What a slow or failed re-run is explained by: each VM of the pool, when it appeared, its phases, when it went.
    const history = (): string => [...world.seenVms].filter(([n]) => n.startsWith("pushed-")).map(([n, h]) => `${n}: seen ${((h.firstSeenAt - rerunAt) / 1000).toFixed(1)} s after the re-run, ${h.phases.join(" → ")}${h.goneAt === undefined ? "" : `, gone at ${((h.goneAt - rerunAt) / 1000).toFixed(1)} s`}`).join("\n");
    await gitea.api("POST", `/repos/acme/pushed/actions/runs/${job.run_id}/rerun`);
    const rerun = await world.waitUntil("the re-run completed", async () => (await gitea.jobs("acme", "pushed")).find((j) => j.run_id === job.run_id && (j.run_attempt ?? 1) >= 2 && j.status === "completed"), 300_000, 250)
      .catch((err: unknown) => Promise.reject(new Error(`${String(err)}\nthe pool's VMs:\n${history()}`)));
    process.stdout.write(`# re-run served ${((Date.now() - rerunAt) / 1000).toFixed(1)} s after it was asked for; the pool's VMs:\n${history().replace(/^/gm, "#   ")}\n`);
    assert.equal(rerun.conclusion, "success");
    const rerunSaid = world.operator.log().slice(logBefore).split("\n").filter((l) => l.includes(`"${NAMESPACE}/pushed"`) && /jobId|queued|demand|delivery/i.test(l));
    process.stdout.write(`# re-run: job ${rerun.id} attempt ${rerun.run_attempt ?? "?"} (the first run was job ${job.id}) served; the operator said:\n${rerunSaid.map((l) => `#   ${l.slice(0, 300)}`).join("\n")}\n`);
    assert.ok(!rerunSaid.some((l) => l.includes("a replay; not counted")), "the re-run's delivery was not taken for a replay of the finished attempt");
    assert.ok(rerunSaid.some((l) => l.includes("a queued delivery verified") && l.includes(`"jobId":${rerun.id},`)), "Gitea's delivery for the re-run was verified with Gitea and counted");
    const after = [...world.seenVms.keys()].filter((n) => n.startsWith("pushed-"));
    assert.equal(after.length, 2, `one more VM for the re-run:\n${history()}`);
  });

  /** Every file of every node's memory snapshots that holds `needle`. */
  async function snapshotFilesHolding(needle: string): Promise<string[]> {
    const hits: string[] = [];
    for (const node of world.nodes) {
      const root = join(node.stateDir, "snapshots");
      for (const entry of await readdir(root, { withFileTypes: true, recursive: true }).catch(() => [])) {
        if (!entry.isFile()) continue;
        const path = join(entry.parentPath, entry.name);
        if ((await readFile(path)).includes(Buffer.from(needle))) hits.push(path);
      }
    }
    return hits;
  }

  /** Jobs one after another (each node boots once and builds its template) until one runs in a restored VM. */
  const UNTIL_RESTORED = 5;

  it("a GitHub pool of a startFrom: Snapshot class: a job runs in a VM restored from its node's template, as itself", async () => {
    await world.applyPool("snap", { minIdle: 0, maxConcurrent: 1, labels: ["self-hosted", "imp", "snap"], snapshot: true });
    const seen: string[] = [];
    const bytes: string[] = [];
    let restored: { vm: string; log: string } | undefined;
    for (let i = 1; i <= UNTIL_RESTORED && restored === undefined; i++) {
      const job = world.queueJob(`snap-${i}`, [{ name: "who", run: "echo host=$(cat /proc/sys/kernel/hostname); echo bytes=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' ')" }], ["self-hosted", "imp", "snap"]);
      await world.waitForJob(job, "completed", 600_000);
      assert.equal(job.conclusion, "success", job.result?.log);
      const vm = world.history(job.runnerName ?? "")?.last;
      assert.ok(vm !== undefined, `job ${job.name} ran on no VM this test saw`);
      const from = vm.status?.startedFrom ?? "?";
      seen.push(`${job.name}: ${vm.metadata.name} on ${vm.status?.nodeName ?? "?"}, ${from}, guest ready ${vm.status?.bootDurationMs ?? "?"} ms after the VMM started`);
      const log = job.result?.log ?? "";
      assert.match(log, new RegExp(`host=${vm.metadata.name}\\b`), "the job saw its own VM's hostname");
      bytes.push(/bytes=([0-9a-f]+)/.exec(log)?.[1] ?? "");
      if (from === "Snapshot") restored = { vm: vm.metadata.name, log };
    }
    process.stdout.write(`# ${seen.join("\n# ")}\n`);
    assert.ok(restored !== undefined, `no job of ${UNTIL_RESTORED} ran in a restored VM:\n${seen.join("\n")}`);
    assert.equal(new Set(bytes).size, bytes.length, `two jobs read the same random bytes: ${bytes.join(", ")}`);
    // The runner's name is in its one-time setup, sent only after the restore: no snapshot holds it.
    assert.deepEqual(await snapshotFilesHolding(restored.vm), [], "a snapshot file holds the restored runner's name");
  });

  it("a Gitea pool of a startFrom: Snapshot class: the real gitea-runner registers and runs a job in a restored VM", async () => {
    const gitea = world.gitea;
    assert.ok(gitea !== undefined);
    await gitea.createRepo("acme", "snap");
    await gitea.putFile("acme", "snap", ".gitea/workflows/ci.yml", "on: [push]\njobs:\n  snap:\n    runs-on: imp-snap\n    steps:\n      - run: echo host=$(cat /proc/sys/kernel/hostname)\n");
    await world.applyGiteaPool("gitea-snap", { minIdle: 0, maxConcurrent: 1, labels: ["imp-snap"], snapshot: true }, NAMESPACE, "acme/snap");
    const seen: string[] = [];
    let restored: string | undefined;
    for (let i = 1; i <= UNTIL_RESTORED && restored === undefined; i++) {
      // The workflow's own push starts the first run; each later push one more.
      const sha: string | undefined = i === 1 ? undefined : await gitea.putFile("acme", "snap", `trigger-${i}.txt`, `${i}\n`);
      const job: GiteaJobView = await world.waitUntil(`Gitea job ${i} completed`, async (): Promise<GiteaJobView | undefined> => {
        const jobs = await gitea.jobs("acme", "snap");
        const mine = sha === undefined ? jobs.at(-1) : jobs.find((j) => j.head_sha === sha);
        return mine?.status === "completed" ? mine : undefined;
      }, 600_000, 250);
      assert.equal(job.conclusion, "success");
      const log: string = await gitea.jobLog("acme", "snap", job.id);
      const runner: string = /\) received task/m.test(log) ? (/^\S+Z (\S+)\(version:[^)]*\) received task/m.exec(log)?.[1] ?? "") : "";
      const vm = world.history(runner)?.last;
      assert.ok(vm !== undefined, `Gitea job ${job.id} ran on no VM this test saw (runner ${runner || "?"})`);
      assert.match(log, new RegExp(`host=${vm.metadata.name}\\b`), "the job saw its own VM's hostname");
      const from = vm.status?.startedFrom ?? "?";
      seen.push(`job ${job.id}: ${vm.metadata.name} on ${vm.status?.nodeName ?? "?"}, ${from}, guest ready ${vm.status?.bootDurationMs ?? "?"} ms after the VMM started`);
      if (from === "Snapshot") restored = vm.metadata.name;
    }
    process.stdout.write(`# ${seen.join("\n# ")}\n`);
    assert.ok(restored !== undefined, `no Gitea job of ${UNTIL_RESTORED} ran in a restored VM:\n${seen.join("\n")}`);
    assert.deepEqual(await snapshotFilesHolding(restored), [], "a snapshot file holds the restored runner's name");
  });
});
