/**
 * The runner pool controller (one key per ImpVMRunnerPool): observe (the pool, its VMs from the
 * cache, create/delete expectations, the forge's runner list every `runnerListIntervalMs`, and the
 * pool's demand through the demand port, src/operator/demand) → `decidePool` (pure) → act (create
 * VMs, deregister and delete idle ones, delete terminal ones, one status write, Events).
 *
 * The controller does not know where demand comes from (webhooks with a backstop listing, a
 * listing alone, a scale-set listener): it reads one number, `demand.waiting(pool)`, and which
 * runners are busy or finished.
 *
 * A pool carries the runner-registration finalizer: on deletion it deletes its VMs itself and
 * lets go only when they are all gone, so every VM can still read the pool's forge settings when
 * its own registration finalizer removes the runner.
 */
import type { Registry } from "prom-client";
import { FINALIZERS, LABELS, type ImpVM, type ImpVMRunnerPool, type ImpVMRunnerPoolStatus } from "../../api/index.ts";
import {
  Controller,
  done,
  isNotFound,
  jsonEqual,
  mutateWithRetry,
  requeueAfter,
  type EventRecorder,
  type Informer,
  type ReconcileContext,
  type ReconcileResult,
  type ResourceClient,
  hasFinalizer,
  addFinalizer,
  removeFinalizer,
  slowStartBatch,
  slowStartTimes,
  type Stored,
} from "../../kube/index.ts";
import { describeError, isRetryable, NO_FAULTS, systemClock, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import type { PoolForges } from "../forges/index.ts";
import { demandKindOf, PoolDemand, type ScaleSetViews } from "../demand/index.ts";
import { PoolExpectations } from "./expectations.ts";
import { decidePool, DEFAULT_FAILURE_BUDGET, restoreFailures, type FailureBudgetPolicy, type FailureState, type PoolDecision, type PoolVmView } from "./pool-decision.ts";
import { decideStatusWrite, poolStatus } from "./pool-status.ts";
import { RunnerRegistrations } from "./runner-registrations.ts";
import { newRunnerVm, waitsForCapacity } from "./runner-vm.ts";

const POOL_VM_INDEX = "imp-operator/vm-by-pool";
/**
 * Pools reconciled at once. Each pool is its own key (one reconcile per pool at a time), so any
 * count is safe; with 2, a churn of 50 pools queued each pool's replacements behind the others'
 * API calls (bench:operator).
 */
export const DEFAULT_POOL_WORKERS = 8;
/**
 * Creates (or deletes) of one reconcile in flight at once, reached by doubling from 1
 * (slowStartBatch). bench:operator at 1,000 VMs, side by side: 16 made the fill slower (158.8 s)
 * than 4 (112.5 s) or 1 (114.0 s) — 8 pools × 16 calls at once only queued in the API server.
 */
const API_CALLS_AT_ONCE = 4;

export interface PoolControllerOptions {
  readonly pools: ResourceClient<ImpVMRunnerPool>;
  readonly vms: ResourceClient<ImpVM>;
  readonly poolCache: Informer<ImpVMRunnerPool>;
  /** Must carry the index "imp-operator/vm-by-pool" (the imp.dev/pool label); `addOperatorIndexes` adds it. */
  readonly vmCache: Informer<ImpVM>;
  /** The pool's forge (a fake in unit tests). */
  readonly forges: Pick<PoolForges, "forPool">;
  readonly recorder: EventRecorder;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly failureBudget?: FailureBudgetPolicy | undefined;
  readonly runnerListIntervalMs?: number | undefined;
  /** Backstop listing of webhook pools (demand's default otherwise). */
  readonly demandListIntervalMs?: number | undefined;
  /** How often a pool whose demand is a listing (Gitea without webhook) lists the jobs waiting on it. */
  readonly queueListIntervalMs?: number | undefined;
  readonly workers?: number;
  /** Test fault point pool.before-replace (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
  /** What each scale-set pool's listener last said (scale-set pools only). */
  readonly scaleSets?: ScaleSetViews;
  /** Whether a node is cordoned: its idle runners are drained (scaled down and replaced elsewhere). Default: none is. */
  readonly cordoned?: (nodeName: string) => boolean;
}

const ms = (ts: string | undefined): number | undefined => (ts === undefined ? undefined : Date.parse(ts));

export class PoolController {
  readonly controller: Controller;
  /** The demand port: webhook deliveries and scale-set messages go in here (DemandEvents), the decision reads it. */
  readonly demand: PoolDemand;
  readonly expectations: PoolExpectations;
  readonly #o: PoolControllerOptions;
  readonly #clock: Clock;
  readonly #policy: FailureBudgetPolicy;
  readonly #failures = new Map<string, FailureState>();
  readonly #registrations: RunnerRegistrations;
  /** When this process last wrote each pool's status (decideStatusWrite). */
  readonly #statusWrittenAt = new Map<string, number>();

  constructor(options: PoolControllerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#policy = options.failureBudget ?? DEFAULT_FAILURE_BUDGET;
    this.#registrations = new RunnerRegistrations(options.forges, this.#clock, options.runnerListIntervalMs);
    this.expectations = new PoolExpectations(this.#clock);
    this.controller = new Controller({ name: "imp-runner-pool", registry: options.registry, workers: options.workers ?? DEFAULT_POOL_WORKERS, logger: options.logger, clock: this.#clock, reconcile: (ctx) => this.#reconcile(ctx) });
    this.demand = new PoolDemand({
      poolCache: options.poolCache,
      forges: options.forges,
      scaleSets: options.scaleSets,
      enqueue: (key) => this.controller.enqueue(key),
      registry: options.registry,
      logger: options.logger,
      clock: this.#clock,
      demandListIntervalMs: options.demandListIntervalMs,
      queueListIntervalMs: options.queueListIntervalMs,
    });
    this.controller.watch(options.poolCache);
    this.controller.watch(options.vmCache, {
      toKeys: (vm) => {
        const pool = vm.metadata?.labels?.[LABELS.pool];
        return pool === undefined ? [] : [`${vm.metadata?.namespace ?? ""}/${pool}`];
      },
    });
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const pool = this.#o.poolCache.get(ctx.key) as Readonly<Stored<ImpVMRunnerPool>> | undefined;
    if (pool === undefined) {
      this.expectations.forget(ctx.key);
      this.demand.forget(ctx.key);
      this.#failures.delete(ctx.key);
      this.#registrations.forget(ctx.key);
      this.#statusWrittenAt.delete(ctx.key);
      return done;
    }
    const vms = this.#vmsOf(pool);
    if (pool.metadata.deletionTimestamp !== undefined) return this.#finalizePool(ctx, pool, vms);
    if (!hasFinalizer(pool, FINALIZERS.runnerRegistration)) {
      await addFinalizer(this.#o.pools, { namespace: pool.metadata.namespace, name: pool.metadata.name }, FINALIZERS.runnerRegistration, ctx.signal);
    }

    const now = this.#clock.now();
    const inCache = new Map(vms.map((vm) => [vm.metadata.name, { deleting: vm.metadata.deletionTimestamp !== undefined }]));
    const pending = this.expectations.settle(ctx.key, inCache);
    await this.#registrations.refresh(ctx, pool, vms, pending.creating, this.demand.runners(pool));
    await this.demand.observe(ctx, pool, vms);
    const queuedJobs = this.demand.waiting(pool);
    // A restarted operator (or a new leader) takes the budget up from the pool's status, not from zero.
    const failures = this.#failures.get(ctx.key) ?? restoreFailures(pool.status?.failureBudget, pool.metadata.generation);
    const decision = decidePool({
      minIdle: pool.spec.minIdle,
      maxConcurrent: pool.spec.maxConcurrent,
      scaleUpStep: pool.spec.scaleUpStep,
      generation: pool.metadata.generation,
      vms: vms.map((vm) => this.#view(pool, vm)),
      creating: pending.creating,
      deletingExpected: pending.deleting,
      queuedJobs,
      failures,
      policy: this.#policy,
      now,
    });
    const before = failures.consecutive;
    this.#failures.set(ctx.key, decision.failures);
    await this.#act(ctx, pool, vms, decision, before);
    const untilStatus = await this.#writeStatus(ctx, pool, decision, queuedJobs);

    const untilList = this.#registrations.nextListInMs(ctx.key, now);
    const untilHold = decision.holdUntil === undefined ? Infinity : Math.max(100, decision.holdUntil - now);
    return requeueAfter(Math.min(untilList, untilHold, untilStatus, this.demand.nextLookInMs(pool, now)));
  }

  #vmsOf(pool: Readonly<Stored<ImpVMRunnerPool>>): Readonly<Stored<ImpVM>>[] {
    return this.#o.vmCache
      .byIndex(POOL_VM_INDEX, pool.metadata.name)
      .filter((vm) => vm.metadata.namespace === pool.metadata.namespace && (vm.metadata.ownerReferences ?? []).some((o) => o.uid === pool.metadata.uid)) as Readonly<Stored<ImpVM>>[];
  }

  #view(pool: Readonly<Stored<ImpVMRunnerPool>>, vm: Readonly<Stored<ImpVM>>): PoolVmView {
    const name = vm.metadata.name;
    const runners = this.demand.runners(pool);
    return {
      name,
      uid: vm.metadata.uid,
      phase: vm.status?.phase,
      deleting: vm.metadata.deletionTimestamp !== undefined,
      busy: runners.isBusy(name),
      finished: runners.isFinished(name),
      bound: vm.status?.nodeName !== undefined,
      draining: vm.status?.nodeName !== undefined && (this.#o.cordoned?.(vm.status.nodeName) ?? false),
      createdAt: ms(vm.metadata.creationTimestamp) ?? 0,
      runningAt: ms(vm.status?.phaseTimestamps?.running),
      failedAt: ms(vm.status?.phaseTimestamps?.failed),
      unschedulable: waitsForCapacity(vm),
    };
  }

  async #act(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, vms: readonly Readonly<Stored<ImpVM>>[], d: PoolDecision, failuresBefore: number): Promise<void> {
    const byName = new Map(vms.map((vm) => [vm.metadata.name, vm]));
    await this.#deleteVms(ctx, d.removeTerminal.flatMap((name) => byName.get(name) ?? []));
    let scaledDown = 0;
    for (const name of d.scaleDown) {
      const vm = byName.get(name);
      if (vm === undefined) continue;
      const runnerId = vm.status?.runner?.id;
      if (runnerId !== undefined) {
        // Deregister first: a runner gone from GitHub can no longer be handed a job while its VM stops.
        const forge = await this.#o.forges.forPool(pool, ctx.signal);
        if ((await forge.removeRunner(name, runnerId, ctx.signal)) === "busy") {
          this.demand.runners(pool).runnerBusy(name, true, false);
          continue;
        }
      } else if (vm.status?.nodeName !== undefined) {
        continue; // bound and being set up right now: let it finish and become idle first
      }
      await this.#deleteVm(ctx, vm);
      scaledDown++;
    }
    if (scaledDown > 0) await this.#event(ctx, pool, "Normal", "ScaledDown", `Deleted ${scaledDown} idle runner VM(s); desired ${d.counts.desired}`);
    const { succeeded: created, error } = await slowStartTimes(d.create, API_CALLS_AT_ONCE, async () => {
      await (this.#o.faults ?? NO_FAULTS).hit("pool.before-replace", ctx.signal);
      const vm = await this.#o.vms.create(newRunnerVm(pool), ctx.signal);
      this.expectations.expectCreated(ctx.key, vm.metadata.name);
    });
    // Said also when a create failed: the VMs created before it exist all the same.
    if (created > 0) await this.#event(ctx, pool, "Normal", "ScaledUp", `Created ${created} runner VM(s); desired ${d.counts.desired}, idle ${d.counts.idle}, busy ${d.counts.busy}, starting ${d.counts.starting}`);
    if (error !== undefined) throw error;
    if (d.failures.consecutive > failuresBefore) {
      const wait = d.holdUntil === undefined ? 0 : Math.round((d.holdUntil - this.#clock.now()) / 1000);
      await this.#event(ctx, pool, "Warning", d.budgetExhausted ? "FailureBudgetExhausted" : "StartFailureBackoff", `${d.failures.consecutive} VM(s) in a row failed before their runner started; next VM in ${wait} s`);
    }
  }

  /** Deletes `vms` in slow-start batches; the first failure is thrown once its batch settled (the others' expectations recorded). */
  async #deleteVms(ctx: ReconcileContext, vms: readonly Readonly<Stored<ImpVM>>[]): Promise<void> {
    const { error } = await slowStartBatch(vms, API_CALLS_AT_ONCE, (vm) => this.#deleteVm(ctx, vm));
    if (error !== undefined) throw error;
  }

  async #deleteVm(ctx: ReconcileContext, vm: Readonly<Stored<ImpVM>>): Promise<void> {
    const pool = vm.metadata.labels?.[LABELS.pool] ?? "";
    try {
      await this.#o.vms.delete({ namespace: vm.metadata.namespace, name: vm.metadata.name }, { uid: vm.metadata.uid, propagationPolicy: "Background", signal: ctx.signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    this.expectations.expectDeleted(`${vm.metadata.namespace ?? ""}/${pool}`, vm.metadata.name);
  }

  async #finalizePool(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, vms: readonly Readonly<Stored<ImpVM>>[]): Promise<ReconcileResult> {
    await this.#deleteVms(ctx, vms.filter((vm) => vm.metadata.deletionTimestamp === undefined));
    if (vms.length > 0) return requeueAfter(5_000);
    try {
      const forge = await this.#o.forges.forPool(pool, ctx.signal);
      await forge.retire?.(ctx.signal);
    } catch (err) {
      // Retried while it may still work; a pool whose credentials are gone must still be deletable.
      if (isRetryable(err)) throw err;
      await this.#event(ctx, pool, "Warning", "ForgeCleanupFailed", `Could not remove the pool's registrations on the forge (remove them by hand): ${describeError(err).slice(0, 500)}`);
    }
    await removeFinalizer(this.#o.pools, { namespace: pool.metadata.namespace, name: pool.metadata.name }, FINALIZERS.runnerRegistration, ctx.signal);
    return done;
  }

  /** Writes the pool's status if it changed; returns in how many ms a change held back (counts only, decideStatusWrite) is due, Infinity if none is. */
  async #writeStatus(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, decision: PoolDecision, queuedJobs: number): Promise<number> {
    const facts = {
      pool,
      decision,
      forge: this.#registrations.view(ctx.key),
      listener: demandKindOf(pool) === "scale-set" ? this.#o.scaleSets?.view(ctx.key) : undefined,
      queuedJobs,
      policy: this.#policy,
      now: this.#clock.now(),
    };
    // Most reconciles change nothing: seen from the cache, that costs no request at all (the
    // GET that mutateWithRetry starts with was ~7 reads per VM lifecycle in bench:operator). A
    // stale cache only delays a write to the reconcile its own update triggers.
    const cached = (pool.status ?? {}) as Readonly<ImpVMRunnerPoolStatus>;
    const write = decideStatusWrite(cached, poolStatus(facts, cached, pool.metadata.generation), this.#statusWrittenAt.get(ctx.key), facts.now);
    if (write.kind === "none") return Infinity;
    if (write.kind === "later") return write.inMs;
    await mutateWithRetry(this.#o.pools, {
      ref: { namespace: pool.metadata.namespace, name: pool.metadata.name },
      subresource: "status",
      // And the write starts from that copy too: a stale one costs a 409 and a fresh read.
      from: pool,
      signal: ctx.signal,
      mutate: (draft) => {
        const old = draft.status ?? {};
        const next = poolStatus(facts, old, draft.metadata.generation);
        if (jsonEqual(next, old)) return false;
        draft.status = next;
      },
    });
    this.#statusWrittenAt.set(ctx.key, facts.now);
    return Infinity;
  }

  async #event(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    await this.#o.recorder.record(pool, { type, reason, message, signal: ctx.signal });
  }
}
