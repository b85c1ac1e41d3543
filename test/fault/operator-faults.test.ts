/**
 * Failure proof, operator side: faults in `imp operator` at each of its handoffs on the runner path
 * (setup minted / stored, reservation written / VM bound, a replacement, a teardown), the operator
 * SIGKILLed from outside (while a job runs, right after a burst of webhooks), and a leader handover
 * between two operator processes. Same world and checker as agent-faults.test.ts: after each case
 * the invariant checker judges I1–I6 (test/fault/fault-case.ts).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { ImpVM } from "../../src/api/index.ts";
import { freePort } from "../../src/devcluster/index.ts";
import { waitFor } from "../../src/shared/index.ts";
import { ImpProcess } from "../e2e/runner-path/imp-process.ts";
import { RunnerWorld, worldUnavailable, nameOf } from "../e2e/runner-path/world.ts";
import { IMP_SYSTEM } from "../harness/rbac.ts";
import { crashed, jobReached, jobRunsThrough, plan, runFaultCase, type CaseContext, type FaultCase } from "./fault-case.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (operator): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

const TERMINAL = new Set(["Succeeded", "Failed"]);
const ofCase = (ctx: CaseContext) => (vm: ImpVM): boolean => vm.metadata.namespace === ctx.namespace;

/** Waits for the operator to crash at its armed point, then starts it again unarmed. */
async function operatorCrashedAndRestarted(ctx: CaseContext): Promise<void> {
  await crashed(ctx.world.operator);
  ctx.faultNow();
  await ctx.world.operator.start({});
}

/** The holder of the operator's leader-election Lease. */
async function leaseHolder(world: RunnerWorld): Promise<string> {
  return (await world.kubectl(["-n", IMP_SYSTEM, "get", "lease", "imp-operator", "-o", "jsonpath={.spec.holderIdentity}"]).catch(() => "")).trim();
}

/** Whether `p` holds the Lease (its identity is `<hostname>-<pid>`). */
async function holdsLease(world: RunnerWorld, p: ImpProcess): Promise<boolean> {
  return p.pid !== undefined && (await leaseHolder(world)).endsWith(`-${p.pid}`);
}

/** A second `imp operator` with the world's arguments but its own webhook port and log (a standby replica). */
async function secondOperator(world: RunnerWorld): Promise<ImpProcess> {
  const p = new ImpProcess(
    "imp operator (replica 2)",
    world.operatorArgs(await freePort()),
    join(world.root, "operator-2.log"),
  );
  await p.start();
  return p;
}

/** Samples the case's VMs until stopped: the most non-terminal ones at once, and every name seen. */
function watchVms(ctx: CaseContext): { stop(): Promise<{ maxLive: number; names: Set<string> }> } {
  let maxLive = 0;
  const names = new Set<string>();
  let running = true;
  const loop = (async () => {
    while (running) {
      const vms = (await ctx.world.listVms().catch(() => [])).filter(ofCase(ctx));
      for (const vm of vms) names.add(nameOf(vm));
      maxLive = Math.max(maxLive, vms.filter((vm) => !TERMINAL.has(vm.status?.phase ?? "") && vm.metadata.deletionTimestamp === undefined).length);
      await new Promise((r) => setTimeout(r, 150));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { maxLive, names };
    },
  };
}

let replica: ImpProcess | undefined;

const cases: FaultCase[] = [
  {
    id: "operator-crash-after-mint",
    injected: "operator SIGKILL (fault point setup.after-mint=crash@1)",
    where: "SetupController, right after GitHub's generate-jitconfig answered for the pool's first VM, before the setup was sealed into its Secret: the runner is registered on GitHub, nothing in the API records it",
    arm: (ctx) => ctx.world.restartOperator(plan("setup.after-mint=crash@1")),
    async run(ctx) {
      await operatorCrashedAndRestarted(ctx);
      // The VM whose setup was minted when the operator died: the pool's only VM so far.
      const minted = [...ctx.world.seenVms.keys()].filter((n) => n.startsWith(`${ctx.pool}-`));
      const vm = await ctx.idleRunner();
      const job = await jobRunsThrough(ctx, "after-mint");
      const answers = ctx.world.github.requestsTo(/generate-jitconfig/, "POST").filter((r) => r.name !== undefined && minted.includes(r.name)).map((r) => r.status);
      return `generate-jitconfig for ${minted.join(", ")} answered ${answers.join(", ")}: the restarted operator found no setup recorded, was refused the registered name (409), removed the stale runner and minted once more; runner ${nameOf(vm)} online once; ${job}`;
    },
  },
  {
    id: "operator-crash-after-record",
    injected: "operator SIGKILL (fault point setup.after-record=crash@1)",
    where: "SetupController, right after status.runner and status.setup (Minted, with the sealed setup) were written in one write, before the reconcile ended: a cache that has not seen that write says the VM has no setup",
    arm: (ctx) => ctx.world.restartOperator(plan("setup.after-record=crash@1")),
    async run(ctx) {
      await operatorCrashedAndRestarted(ctx);
      const vm = await ctx.idleRunner();
      const job = await jobRunsThrough(ctx, "after-record");
      // Every VM of the pool, the one whose reconcile crashed included, was minted exactly once.
      const byName = new Map<string, number[]>();
      for (const r of ctx.world.github.requestsTo(/generate-jitconfig/, "POST")) if (r.name?.startsWith(`${ctx.pool}-`) === true) byName.set(r.name, [...(byName.get(r.name) ?? []), r.status]);
      for (const [name, answers] of byName) assert.deepEqual(answers, [201], `${name} was minted once`);
      return `the restarted operator read the recorded setup from the VM and did not mint again (generate-jitconfig: ${[...byName].map(([n, a]) => `${n} ${a.join("/")}`).join(", ")}); runner ${nameOf(vm)} online; ${job}`;
    },
  },
  {
    id: "operator-crash-before-bind",
    injected: "operator SIGKILL (fault point scheduler.before-bind=crash@1)",
    where: "SchedulerController, after the node's reservation (ImpNode reservations annotation) was written for the pool's first VM, before the VM's status.nodeName: reserved, Pending, unbound",
    arm: (ctx) => ctx.world.restartOperator(plan("scheduler.before-bind=crash@1")),
    async run(ctx) {
      await operatorCrashedAndRestarted(ctx);
      const vm = await ctx.idleRunner();
      const job = await jobRunsThrough(ctx, "after-bind");
      return `the restarted scheduler rolled the reservation forward or pruned it and bound ${nameOf(vm)} to ${vm.status?.nodeName ?? "?"} once; runner online; ${job}`;
    },
  },
  {
    id: "operator-crash-before-replace",
    injected: "operator SIGKILL (fault point pool.before-replace=crash@2)",
    where: "PoolController, before the pool's second VM create: the first runner has taken a job, the pool decided to create a VM to keep minIdle, nothing is created yet",
    arm: (ctx) => ctx.world.restartOperator(plan("pool.before-replace=crash@2")),
    async run(ctx) {
      const first = await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-consume`, [{ name: "step", run: "sleep 5; echo done" }], ctx.labels);
      await operatorCrashedAndRestarted(ctx);
      await jobReached(job, "completed");
      assert.equal(job.conclusion, "success", `${job.name} concluded ${job.conclusion ?? "?"}`);
      const next = await ctx.idleRunner();
      return `${job.name} ${job.conclusion} on ${job.runnerName ?? "?"} (${nameOf(first)}); the restarted operator created the VM the crashed one had decided on; ${nameOf(next)} idle online`;
    },
  },
  {
    id: "operator-crash-before-deregister",
    injected: "operator SIGKILL (fault point teardown.before-deregister=crash@1)",
    where: "SetupController, first thing when the terminal VM of a completed job is reconciled, before its runner is removed from GitHub: VM terminal, registration and finalizer still there",
    arm: (ctx) => ctx.world.restartOperator(plan("teardown.before-deregister=crash@1")),
    async run(ctx) {
      const first = await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-done`, [{ name: "step", run: "echo done" }], ctx.labels);
      await jobReached(job, "completed");
      await operatorCrashedAndRestarted(ctx);
      const gone = await waitFor(`${nameOf(first)} deregistered and deleted`, () => (ctx.world.github.runnerNamed(nameOf(first)) === undefined && ctx.world.history(nameOf(first))?.goneAt !== undefined ? true : undefined), { timeoutMs: 180_000, intervalMs: 200 });
      const next = await ctx.idleRunner();
      return `${job.name} ${job.conclusion ?? "?"} on ${nameOf(first)}; the restarted operator removed its registration (${gone ? "runner gone from GitHub" : "?"}) and finalizer, the VM was deleted (phases ${ctx.world.history(nameOf(first))?.phases.join("→") ?? "?"}); replacement ${nameOf(next)} online`;
    },
  },
  {
    id: "operator-killed-job-running",
    injected: "SIGKILL of the imp operator process from outside",
    where: "while a job runs on a runner VM (job in_progress), then the operator restarted",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const job = ctx.world.queueJob(`${ctx.pool}-long`, [{ name: "long", run: "sleep 20; echo done" }], ctx.labels);
      await ctx.world.waitForJob(job, "in_progress");
      ctx.faultNow();
      await ctx.world.operator.kill();
      await ctx.world.operator.start({});
      await jobReached(job, "completed");
      assert.equal(job.conclusion, "success", `${job.name} concluded ${job.conclusion ?? "?"}`);
      await waitFor(`${nameOf(vm)} cleaned up`, () => (ctx.world.history(nameOf(vm))?.goneAt !== undefined ? true : undefined), { timeoutMs: 180_000, intervalMs: 200 });
      const next = await ctx.idleRunner();
      return `the job went on without the operator: ${job.name} ${job.conclusion} on ${job.runnerName ?? "?"}; the restarted operator deregistered and deleted ${nameOf(vm)} (phases ${ctx.world.history(nameOf(vm))?.phases.join("→") ?? "?"}); replacement ${nameOf(next)} online`;
    },
  },
  {
    id: "operator-killed-after-webhooks",
    injected: "SIGKILL of the imp operator process from outside",
    where: "right after a burst of two queued workflow_job webhooks (its deliveries in flight or just handled), then the operator restarted",
    async run(ctx) {
      await ctx.idleRunner();
      const jobs = [1, 2].map((i) => ctx.world.queueJob(`${ctx.pool}-burst-${i}`, [{ name: "step", run: `echo burst ${i}` }], ctx.labels));
      ctx.faultNow();
      await ctx.world.operator.kill();
      await ctx.world.operator.start({});
      for (const job of jobs) {
        await jobReached(job, "completed");
        assert.equal(job.conclusion, "success", `${job.name} concluded ${job.conclusion ?? "?"}`);
      }
      const runners = jobs.map((j) => j.runnerName ?? "?");
      assert.equal(new Set(runners).size, runners.length, `each job on its own runner, got ${runners.join(", ")}`);
      await ctx.idleRunner();
      return `both jobs ran once each, on ${runners.join(" and ")} (one VM per job); the pool is back to one idle runner`;
    },
  },
  {
    id: "operator-leader-handover",
    injected: "SIGKILL of the leading imp operator (holder of the imp-operator Lease) with a standby replica running",
    where: "while the pool scales up from nothing to minIdle 3 (maxConcurrent 3): the first of its VMs exists, the rest may not",
    pool: { minIdle: 3, maxConcurrent: 3 },
    async arm(ctx) {
      replica = await secondOperator(ctx.world);
      // The world's operator has led since the world started; the replica stands by.
      await waitFor("the world's operator holds the Lease", async () => ((await holdsLease(ctx.world, ctx.world.operator)) ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });
    },
    async run(ctx) {
      const r = replica;
      assert.ok(r !== undefined);
      const watch = watchVms(ctx);
      try {
        await ctx.vm("the first VM of the scale-up", () => true, 120_000);
        ctx.faultNow();
        await ctx.world.operator.kill();
        const tookOver = Date.now();
        await waitFor("the replica holds the Lease", async () => ((await holdsLease(ctx.world, r)) ? true : undefined), { timeoutMs: 60_000, intervalMs: 200 });
        const handoverMs = Date.now() - tookOver;
        // The killed leader comes back as the standby (its pod restarted).
        await ctx.world.operator.start({});
        await waitFor("three idle runners", async () => {
          const vms = (await ctx.world.listVms()).filter(ofCase(ctx));
          const idle = vms.filter((vm) => vm.status?.phase === "Running" && ctx.world.github.runnerNamed(nameOf(vm))?.status === "online" && ctx.world.github.runnerNamed(nameOf(vm))?.busy === false);
          return idle.length >= 3 ? true : undefined;
        }, { timeoutMs: 420_000, intervalMs: 250 });
        const { maxLive, names } = await watch.stop();
        assert.ok(maxLive <= 3, `at most maxConcurrent 3 live VMs at once, saw ${maxLive} (${[...names].join(", ")})`);
        // Hand back: the replica stops (SIGTERM), the world's operator leads again for the next cases.
        await r.stop();
        replica = undefined;
        await waitFor("the world's operator holds the Lease again", async () => ((await holdsLease(ctx.world, ctx.world.operator)) ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });
        return `the replica took the Lease ${handoverMs} ms after the leader died and finished the scale-up: 3 idle runners, at most ${maxLive} live VMs at once, ${names.size} VM(s) in all (${[...names].join(", ")}); the replica stopped and the restarted operator led again`;
      } finally {
        await watch.stop();
      }
    },
  },
];

describe("failure proof: operator faults", { skip: unavailable, timeout: 3_600_000, concurrency: 1 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await replica?.stop().catch(() => undefined);
    await world?.dispose();
  });
  for (const c of cases) {
    it(`${c.id}: ${c.injected} ${c.where}`, async () => {
      const started = Date.now();
      // A case that failed half-way may leave the operator stopped; the next case starts from a running one.
      if (!world.operator.running) await world.operator.start({});
      const result = await runFaultCase(world, suite, c);
      process.stdout.write(`# ${c.id}: ${result.impDid}; recovered in ${result.recoverMs} ms; case took ${Math.round((Date.now() - started) / 1000)} s\n`);
    });
  }
});
