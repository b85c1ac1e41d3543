/**
 * One fault case of the failure-proof suite on a RunnerWorld: each case gets a namespace of its own
 * (its pool, VMs and Secrets), injects one fault at a chosen point, lets Imp recover, then the
 * invariant checker judges I1–I6 in that namespace and on every node; the result is recorded for
 * docs/failure-proof.md (scripts/gen-failure-proof.ts) and every invariant is asserted.
 *
 * Cases arm fault points by restarting `imp operator` or an `imp agent` with IMP_TEST_FAULT_POINTS
 * in its environment (a `crash` is the process SIGKILLing itself at the point), or act from outside
 * (SIGKILL of a VMM or supervisor, SIGSTOP of an agent, a GitHub test server fault).
 */
import assert from "node:assert/strict";
import { relative, resolve } from "node:path";
import type { ImpVM } from "../../src/api/index.ts";
import { describeError, waitFor } from "../../src/shared/index.ts";
import type { RunnerWorld } from "../e2e/runner-path/world.ts";
import type { TestJob } from "../github/server.ts";
import { nameOf } from "../e2e/runner-path/world.ts";
import { checkInvariants, type CheckOptions } from "./invariants.ts";
import { recordCase, type FaultCaseResult, type InvariantId } from "./report.ts";

const repoRoot = resolve(import.meta.dirname, "../..");

export interface CaseContext {
  readonly world: RunnerWorld;
  /** The case's own namespace, with the credentials Secret and the runner template. */
  readonly namespace: string;
  /** The case's pool name; its VMs are named `<pool>-…`, its runners too. */
  readonly pool: string;
  /** Labels of the case's pool (jobs for it carry them). */
  readonly labels: readonly string[];
  /** Call at the moment the fault is injected: bounds count from here. */
  faultNow(): void;
  /** Waits for a VM of the case's pool that `check` accepts. */
  vm(what: string, check: (vm: ImpVM) => boolean, timeoutMs?: number): Promise<ImpVM>;
  /** A runner VM of the pool that is Running with its runner online and idle. */
  idleRunner(timeoutMs?: number): Promise<ImpVM>;
}

export interface FaultCase {
  readonly id: string;
  /** What is injected, for the report. */
  readonly injected: string;
  /** Where on the runner path. */
  readonly where: string;
  /** Pool shape; default minIdle 1, maxConcurrent 2, webhook mode. */
  readonly pool?: { minIdle: number; maxConcurrent: number; scaleSet?: boolean; webhook?: boolean; snapshot?: boolean };
  /** A Gitea pool (the world has a Gitea): its own repository acme/<pool>, runners labelled <pool>. */
  readonly forge?: "gitea";
  readonly bounds?: Partial<Record<InvariantId, number>>;
  /** Before the pool exists: arm fault points (restart a process with a plan). */
  arm?(ctx: CaseContext): Promise<void>;
  /** Injects the fault and drives the path through it; returns what Imp did, for the report. */
  run(ctx: CaseContext): Promise<string>;
}

/** Runs one case: namespace, pool, fault, recovery, invariants, cleanup; records and asserts. */
export async function runFaultCase(world: RunnerWorld, suite: string, c: FaultCase): Promise<FaultCaseResult> {
  const namespace = `f-${c.id}`.slice(0, 63).replace(/-+$/, "");
  const pool = `p${Math.abs(hash(c.id)).toString(36)}`.slice(0, 8);
  const labels = ["self-hosted", "imp", pool];
  await world.addNamespace(namespace);
  const since = Date.now();
  let faultAt: number | undefined;
  const ofPool = (vm: ImpVM): boolean => vm.metadata.namespace === namespace;
  const ctx: CaseContext = {
    world,
    namespace,
    pool,
    labels,
    faultNow: () => {
      faultAt ??= Date.now();
    },
    vm: (what, check, timeoutMs = 300_000) => world.waitForVm(`${c.id}: ${what}`, (vms) => vms.find((vm) => ofPool(vm) && check(vm)), timeoutMs),
    idleRunner: (timeoutMs = 300_000) =>
      world.waitForVm(`${c.id}: an idle runner`, (vms) => vms.find((vm) => ofPool(vm) && vm.status?.phase === "Running" && world.github.runnerNamed(nameOf(vm))?.status === "online" && world.github.runnerNamed(nameOf(vm))?.busy === false), timeoutMs),
  };
  let impDid: string;
  try {
    await c.arm?.(ctx);
    if (c.forge === "gitea") {
      if (world.gitea === undefined) throw new Error(`${c.id}: a Gitea case needs a world started with { gitea: true }`);
      await world.gitea.createRepo("acme", pool);
      await world.applyGiteaPool(pool, { ...(c.pool ?? { minIdle: 1, maxConcurrent: 2 }), labels: [pool] }, namespace, `acme/${pool}`);
    } else {
      await world.applyPool(pool, { ...(c.pool ?? { minIdle: 1, maxConcurrent: 2 }), labels }, namespace);
    }
    impDid = await c.run(ctx);
  } catch (err) {
    // Recorded, so the report shows the case failed; its pool goes, or its VMs would be the next
    // case's crash victims and count there as node resources of no live VM (I5).
    await recordCase({ id: c.id, suite: relative(repoRoot, suite), injected: c.injected, where: c.where, impDid: `the case failed before its checks: ${describeError(err).slice(0, 2000)}`, invariants: [], recoverMs: 0, passed: false, at: new Date().toISOString() });
    await removePools(world, namespace);
    throw err;
  }
  const at = faultAt ?? Date.now();
  // Recovery is judged with the pool still there: Imp must restore minIdle on its own. Then the pool
  // goes, and the checker judges again that everything of the case is cleaned up.
  const options: CheckOptions = { faultAt: at, since, runnerFilter: (name) => name.startsWith(`${pool}-`), ...(c.bounds === undefined ? {} : { boundsMs: c.bounds }) };
  const recovered = await checkInvariants(world.faultWorld(namespace), options);
  await removePools(world, namespace);
  const cleaned = await checkInvariants(world.faultWorld(namespace), { ...options, faultAt: Date.now() });
  const invariants = recovered.map((o) => {
    const after = cleaned.find((x) => x.id === o.id);
    return after === undefined || after.held ? o : { ...after, detail: `after the pool was deleted: ${after.detail}` };
  });
  const result: FaultCaseResult = {
    id: c.id,
    suite: relative(repoRoot, suite),
    injected: c.injected,
    where: c.where,
    impDid,
    invariants,
    recoverMs: Math.max(0, ...invariants.map((o) => o.withinMs ?? 0)),
    passed: invariants.every((o) => o.held),
    at: new Date().toISOString(),
  };
  await recordCase(result);
  for (const o of invariants) assert.ok(o.held, `${c.id}: ${o.id} does not hold: ${o.detail}`);
  // Whatever the fault, what Imp sent GitHub and what the stand-in answered stay within GitHub's description.
  assert.deepEqual(world.github.violations, [], `${c.id}: the GitHub test server saw requests or sent responses off GitHub's OpenAPI description`);
  return result;
}

/** Deletes every pool of the namespace (so their VMs) and waits, bounded, for the VMs to be gone. */
async function removePools(world: RunnerWorld, namespace: string): Promise<void> {
  await world.kubectl(["-n", namespace, "delete", "impvmrunnerpool", "--all", "--wait=false"]).catch(() => "");
  await waitFor(`${namespace}: the pools' VMs gone`, async () => ((await world.listVms().catch(() => [])).some((vm) => vm.metadata.namespace === namespace) ? undefined : true), { timeoutMs: 180_000, intervalMs: 250 }).catch(() => undefined);
}

function hash(text: string): number {
  let h = 0;
  for (const ch of text) h = (Math.imul(h, 31) + ch.charCodeAt(0)) | 0;
  return h;
}

/**
 * Waits for a job's status without the world's liveness check: in many cases a process is meant to
 * be down (crashed at its point, killed, or the API server gone) while the job goes on.
 */
export async function jobReached(job: TestJob, status: TestJob["status"], timeoutMs = 300_000): Promise<TestJob> {
  return waitFor(`job ${job.name} ${status}`, () => (job.status === status ? job : undefined), { timeoutMs, intervalMs: 100 });
}

/** Queues a job for the case's pool, waits for it to complete and succeed; returns what happened, for the report. */
export async function jobRunsThrough(ctx: CaseContext, name: string, run = "echo hi"): Promise<string> {
  const job = ctx.world.queueJob(`${ctx.pool}-${name}`, [{ name: "step", run }], ctx.labels);
  await ctx.world.waitForJob(job, "completed", 300_000);
  assert.equal(job.conclusion, "success", `${job.name} concluded ${job.conclusion ?? "?"}: ${job.result?.log ?? ""}`);
  return `${job.name} ${job.conclusion} on ${job.runnerName ?? "?"}`;
}

/** The environment that arms `plan` (see docs/failure-proof-points.md). */
export const plan = (p: string): Record<string, string> => ({ IMP_TEST_FAULT_POINTS: p });

/** Waits until `process` has exited on its own (a `crash` fault point SIGKILLed it). */
export async function crashed(p: { running: boolean; name: string }, timeoutMs = 300_000): Promise<void> {
  await waitFor(`${p.name} crashed at its fault point`, () => (p.running ? undefined : true), { timeoutMs, intervalMs: 100 });
}

/** Arms every agent with `faultPlan` (each agent restarted with it). */
export async function armAgents(world: RunnerWorld, faultPlan: string): Promise<void> {
  for (const node of world.nodes) await world.restartAgent(node, plan(faultPlan));
}

/**
 * Waits until one agent crashed at its armed point, restarts it unarmed, and disarms the others
 * (restarted unarmed too), so that exactly one crash happens. Returns the crashed node's name.
 */
export async function oneAgentCrashed(ctx: CaseContext, timeoutMs = 300_000): Promise<string> {
  const { world } = ctx;
  const node = await waitFor("an agent crashed at its fault point", () => world.nodes.find((n) => !n.agent.running), { timeoutMs, intervalMs: 100 });
  ctx.faultNow();
  await node.agent.start({});
  for (const other of world.nodes) if (other !== node) await world.restartAgent(other, {});
  return node.name;
}
