/**
 * The runner pool controller (one key per ImpVMRunnerPool): observe (the pool, its VMs from the
 * cache, create/delete expectations, the forge's runner list every `runnerListIntervalMs`, queued
 * jobs from webhooks and, for webhook pools, from the forge's own listing every
 * `demandListIntervalMs`, busy runners from webhooks) → `decidePool` (pure) → act (create VMs,
 * deregister and delete idle ones, delete terminal ones, one status write, Events).
 *
 * Demand is verified before it costs a VM, whatever the operator remembers: a `queued` delivery for
 * a job seen taken or completed is a replay and never counts (no call to the forge); any other
 * counts only once the forge says the job still waits. A delivery's id is not signed, and the
 * memory of jobs seen is gone after a restart, so a validly signed body replayed under a new id
 * must meet the forge's own answer, however recent the job. A dropped delivery is found by the
 * next listing.
 *
 * Scale-set pools (spec.github.scaleSet) take their demand from their listener instead
 * (src/operator/scale-sets): the jobs GitHub assigned to the scale set and no runner runs yet,
 * from the latest statistics; their busy and finished runners from JobStarted and JobCompleted.
 *
 * A pool carries the runner-registration finalizer: on deletion it deletes its VMs itself and
 * lets go only when they are all gone, so every VM can still read the pool's GitHub settings when
 * its own registration finalizer removes the runner.
 */
import { Counter, type Registry } from "prom-client";
import {
  API_VERSION,
  FINALIZERS,
  IMP_VM_RUNNER_POOL,
  LABELS,
  type ImpVM,
  type ImpVMRunnerPool,
  type ImpVMRunnerPoolStatus,
  type ScaleSetStatus,
} from "../../api/index.ts";
import type { JobMessage, WorkflowJobEvent } from "../../github/index.ts";
import {
  Controller,
  done,
  isNotFound,
  jsonEqual,
  keyOf,
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
  type Stored,
} from "../../kube/index.ts";
import { describeError, isRetryable, NO_FAULTS, systemClock, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import type { PoolForges } from "../setup/pool-forges.ts";
import { setCondition } from "./conditions.ts";
import { poolConditions } from "./pool-conditions.ts";
import { PoolExpectations } from "./expectations.ts";
import { decidePool, DEFAULT_FAILURE_BUDGET, failureBudgetStatus, restoreFailures, type FailureBudgetPolicy, type FailureState, type PoolDecision, type PoolVmView } from "./pool-decision.ts";
import { poolTakesJob } from "./pool-scope.ts";
import type { QueuedJob } from "../../forge/index.ts";
import { RunnerActivity } from "./runner-activity.ts";

export const DEFAULT_RUNNER_LIST_INTERVAL_MS = 30_000;
/** How often a webhook pool lists the jobs waiting on its forge: the most a dropped delivery delays a job. */
export const DEFAULT_DEMAND_LIST_INTERVAL_MS = 30_000;
/** How often a Gitea pool lists the jobs waiting on Gitea: one request per pool, the most a job waits for its VM to be ordered. */
export const DEFAULT_QUEUE_LIST_INTERVAL_MS = 5_000;
/** What became of each demand signal, by where it came from. */
export const DEMAND_RESULTS = ["counted", "replayed", "stale", "unverified"] as const;
const POOL_VM_INDEX = "imp-operator/vm-by-pool";
/** `generateName: <pool>-` gives exactly five of these characters. */
const vmNamePattern = (pool: string): RegExp => new RegExp(`^${pool.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}-[a-z0-9]{5}$`);

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
  readonly demandListIntervalMs?: number | undefined;
  /** How often a pool whose forge has no push (Gitea) lists the jobs waiting on it. */
  readonly queueListIntervalMs?: number | undefined;
  readonly workers?: number;
  /** Test fault point pool.before-replace (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
  /** What each scale-set pool's listener last said (scale-set pools only). */
  readonly scaleSets?: { view(poolKey: string): ScaleSetPoolView | undefined };
  /** Whether a node is cordoned: its idle runners are drained (scaled down and replaced elsewhere). Default: none is. */
  readonly cordoned?: (nodeName: string) => boolean;
}

/** A scale-set pool's listener, as the pool controller reads it (ScaleSetListeners.view). */
export interface ScaleSetPoolView {
  readonly reason: string;
  readonly message: string;
  readonly scaleSetId: number | undefined;
  readonly sessionId: string | undefined;
  readonly statistics: { readonly totalAssignedJobs: number; readonly totalRunningJobs: number } | undefined;
}

interface GitHubView {
  readonly at: number;
  readonly ok: boolean;
  readonly message: string;
}

const ms = (ts: string | undefined): number | undefined => (ts === undefined ? undefined : Date.parse(ts));

export class PoolController {
  readonly controller: Controller;
  readonly activity: RunnerActivity;
  readonly expectations: PoolExpectations;
  readonly #o: PoolControllerOptions;
  readonly #clock: Clock;
  readonly #policy: FailureBudgetPolicy;
  readonly #listIntervalMs: number;
  readonly #failures = new Map<string, FailureState>();
  readonly #github = new Map<string, GitHubView>();
  /** When each webhook pool last listed its queued jobs. */
  readonly #demandListedAt = new Map<string, number>();
  /** Verifications of queued deliveries still asking the forge. */
  readonly #verifying = new Set<Promise<void>>();
  readonly #demandIntervalMs: number;
  readonly #queueListIntervalMs: number;
  readonly #demand: Counter;

  constructor(options: PoolControllerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#policy = options.failureBudget ?? DEFAULT_FAILURE_BUDGET;
    this.#listIntervalMs = options.runnerListIntervalMs ?? DEFAULT_RUNNER_LIST_INTERVAL_MS;
    this.#demandIntervalMs = options.demandListIntervalMs ?? DEFAULT_DEMAND_LIST_INTERVAL_MS;
    this.#queueListIntervalMs = options.queueListIntervalMs ?? DEFAULT_QUEUE_LIST_INTERVAL_MS;
    this.#demand = new Counter({ name: "imp_operator_demand_signals_total", help: "Demand signals (queued jobs) by source (webhook, listing) and what became of them: counted, replayed (a job seen taken or completed), stale (the forge says it no longer waits), unverified (the forge could not be asked).", labelNames: ["source", "result"], registers: [options.registry] });
    for (const source of ["webhook", "listing"]) for (const result of DEMAND_RESULTS) this.#demand.inc({ source, result }, 0);
    this.activity = new RunnerActivity(this.#clock);
    this.expectations = new PoolExpectations(this.#clock);
    this.controller = new Controller({ name: "imp-runner-pool", registry: options.registry, workers: options.workers ?? 2, logger: options.logger, clock: this.#clock, reconcile: (ctx) => this.#reconcile(ctx) });
    this.controller.watch(options.poolCache);
    this.controller.watch(options.vmCache, {
      toKeys: (vm) => {
        const pool = vm.metadata?.labels?.[LABELS.pool];
        return pool === undefined ? [] : [`${vm.metadata?.namespace ?? ""}/${pool}`];
      },
    });
  }

  /**
   * A verified workflow_job webhook: queued jobs burst matching pools, in_progress marks a runner
   * busy, completed frees it; a job completed without a runner (cancelled while queued) is no
   * longer demand. `audience`: the pools the delivery's secret is trusted for (a pool's own secretRef), or all.
   */
  onWorkflowJob(event: WorkflowJobEvent, audience: ReadonlySet<string> | "all" = "all"): void {
    const heard = (p: Readonly<Stored<ImpVMRunnerPool>>): boolean => audience === "all" || audience.has(keyOf(p));
    if (event.action === "queued") {
      // One pool per job, the first by name: counting a job in several pools would over-create.
      const pool = this.#o.poolCache
        .list()
        .filter((p) => (p.spec.webhook?.enabled ?? false) && p.metadata.deletionTimestamp === undefined && heard(p as Readonly<Stored<ImpVMRunnerPool>>) && poolTakesJob(p as Readonly<Stored<ImpVMRunnerPool>>, event))
        .sort((a, b) => keyOf(a).localeCompare(keyOf(b)))[0];
      if (pool !== undefined) this.#queuedDelivery(pool as Readonly<Stored<ImpVMRunnerPool>>, event);
      return;
    }
    for (const p of this.#o.poolCache.list()) if (heard(p as Readonly<Stored<ImpVMRunnerPool>>) && poolTakesJob(p as Readonly<Stored<ImpVMRunnerPool>>, event)) this.activity.repositoryHeard(keyOf(p), event.repository.fullName);
    if (event.runnerName === null) {
      // Completed without a runner: cancelled while queued. No pool waits for it any more; a
      // pool's own secret can end only that pool's demand.
      const waited = this.activity.jobTaken(event.jobId, audience);
      for (const poolKey of waited) this.controller.enqueue(poolKey);
      return;
    }
    if (audience !== "all") {
      // A pool's own secret speaks only about that pool's runners.
      const runner = event.runnerName;
      if (!this.#o.poolCache.list().some((p) => heard(p as Readonly<Stored<ImpVMRunnerPool>>) && vmNamePattern(p.metadata.name).test(runner))) return;
    }
    this.activity.jobTaken(event.jobId, audience);
    if (event.action === "completed") this.activity.runnerFinished(event.runnerName);
    else this.activity.runnerBusy(event.runnerName, true);
    for (const pool of this.#o.poolCache.list()) {
      if (heard(pool as Readonly<Stored<ImpVMRunnerPool>>) && vmNamePattern(pool.metadata.name).test(event.runnerName)) this.controller.enqueue(keyOf(pool));
    }
  }

  /**
   * A JobStarted or JobCompleted from a scale-set pool's listener: its runner (= the VM's name) is
   * busy, or finished. Idempotent (a message may come again after a crash); a runner name that is
   * not one of the pool's VMs changes nothing.
   */
  onScaleSetJob(poolKey: string, job: JobMessage): void {
    if (job.messageType !== "JobStarted" && job.messageType !== "JobCompleted") return;
    const pool = this.#o.poolCache.get(poolKey);
    if (pool === undefined || job.runnerName === "" || !vmNamePattern(pool.metadata.name).test(job.runnerName)) return;
    if (job.messageType === "JobStarted") this.activity.runnerBusy(job.runnerName, true);
    else this.activity.runnerFinished(job.runnerName);
    this.controller.enqueue(poolKey);
  }

  /** A signed `queued` delivery for `pool`: never counted if its job settled, else counted once the forge says it waits. */
  #queuedDelivery(pool: Readonly<Stored<ImpVMRunnerPool>>, event: WorkflowJobEvent): void {
    const key = keyOf(pool);
    if (this.activity.isSettled(event.jobId, key)) {
      this.#demand.inc({ source: "webhook", result: "replayed" });
      this.#o.logger.warn({ pool: key, jobId: event.jobId, deliveryId: event.deliveryId }, "a queued delivery for a job already taken or completed: a replay; not counted");
      return;
    }
    const check = this.#verifyThenCount(pool, event).finally(() => this.#verifying.delete(check));
    this.#verifying.add(check);
  }

  /** Resolves once every delivery received so far was verified and counted or dropped (tests wait on it). */
  async demandSettled(): Promise<void> {
    while (this.#verifying.size > 0) await Promise.all([...this.#verifying]);
  }

  async #verifyThenCount(pool: Readonly<Stored<ImpVMRunnerPool>>, event: WorkflowJobEvent): Promise<void> {
    const key = keyOf(pool);
    try {
      const forge = await this.#o.forges.forPool(pool);
      const state = (await forge.jobState?.(event.repository.fullName, event.jobId)) ?? "unknown";
      if (state === "queued") {
        this.#count(key, "webhook", event.jobId, event.repository.fullName);
        return;
      }
      this.#demand.inc({ source: "webhook", result: "stale" });
      this.#o.logger.info({ pool: key, jobId: event.jobId, deliveryId: event.deliveryId, state }, "a queued delivery for a job that no longer waits (the forge says so); not counted");
    } catch (err) {
      // Not counted: the next listing finds the job if it really waits.
      this.#demand.inc({ source: "webhook", result: "unverified" });
      this.#o.logger.warn({ pool: key, jobId: event.jobId, err: describeError(err) }, "cannot verify a queued delivery with the forge; the next listing decides");
    }
  }

  #count(poolKey: string, source: "webhook" | "listing", jobId: number, repository: string): void {
    if (!this.activity.jobQueued(poolKey, jobId, repository)) {
      this.#demand.inc({ source, result: "replayed" });
      return;
    }
    this.#demand.inc({ source, result: "counted" });
    this.controller.enqueue(poolKey);
  }

  /**
   * A webhook pool's periodic listing of the jobs waiting on its forge, so that no job waits for a
   * lost delivery longer than one interval. Repository scope: the pool's repository; organization
   * scope: the repositories the pool heard of within a day (at most 20); enterprise: none (see
   * docs/operator.md). A job counts in the first pool by name that takes it, as a delivery does.
   */
  async #refreshDemand(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, vms: readonly Readonly<Stored<ImpVM>>[]): Promise<void> {
    const interval = this.#listingIntervalMs(pool);
    if (interval === undefined) return;
    const startedAt = this.#clock.now();
    const last = this.#demandListedAt.get(ctx.key);
    // A forge without push (Gitea) says a job was taken only by no longer listing it. A VM that ended
    // since the last listing may have run a job counted there: list again before that demand can
    // order a replacement for a job already done.
    const endedSince = pool.spec.gitea !== undefined && last !== undefined && vms.some((vm) => (ms(vm.status?.phaseTimestamps?.succeeded) ?? ms(vm.status?.phaseTimestamps?.failed) ?? 0) > last);
    if (last !== undefined && startedAt - last < interval && !endedSince) return;
    this.#demandListedAt.set(ctx.key, startedAt);
    const gh = pool.spec.github;
    const repositories = gh === undefined ? [] : gh.scope === "repo" ? [gh.repository ?? ""] : gh.scope === "org" ? this.activity.recentRepositories(ctx.key) : [];
    try {
      const forge = await this.#o.forges.forPool(pool, ctx.signal);
      let listed: readonly QueuedJob[];
      let covered: readonly string[] | "whole-scope" = repositories;
      if (forge.listScopeQueuedJobs !== undefined) {
        listed = await forge.listScopeQueuedJobs(ctx.signal);
        covered = "whole-scope";
      } else if (forge.listQueuedJobs !== undefined && repositories.length > 0) listed = await forge.listQueuedJobs(repositories, ctx.signal);
      else return;
      const jobs = listed.filter((j) => this.#firstPoolFor(j, ctx.key));
      for (const job of jobs) {
        if (this.activity.isQueued(ctx.key, job.id)) continue;
        if (this.activity.isSettled(job.id, ctx.key)) {
          this.#demand.inc({ source: "listing", result: "replayed" });
          continue;
        }
        ctx.logger.info({ jobId: job.id, repository: job.repository }, "a queued job found by listing (its delivery was lost or is late)");
        this.#count(ctx.key, "listing", job.id, job.repository);
      }
      this.activity.jobsListed(ctx.key, covered, jobs.map((j) => j.id), startedAt);
      ctx.logger.debug({ repositories, queued: jobs.map((j) => j.id) }, "listed the jobs waiting on the forge");
    } catch (err) {
      ctx.logger.warn({ err: describeError(err) }, "cannot list the jobs waiting on the forge");
    }
  }

  /**
   * How often the pool lists the jobs waiting on its forge, or undefined if it does not: GitHub
   * webhook pools every demandListIntervalMs (a backstop for lost deliveries), Gitea pools every
   * queueListIntervalMs (their demand comes from the listing).
   */
  #listingIntervalMs(pool: Readonly<Stored<ImpVMRunnerPool>>): number | undefined {
    if (pool.spec.gitea !== undefined) return this.#queueListIntervalMs;
    return (pool.spec.webhook?.enabled ?? false) ? this.#demandIntervalMs : undefined;
  }

  /** Whether `poolKey` is the first webhook pool by name that takes the job (one pool per job, as for a delivery). */
  #firstPoolFor(job: QueuedJob, poolKey: string): boolean {
    const [owner = "", name = ""] = job.repository.split("/");
    const asDelivered = { labels: job.labels, repository: { owner, name, fullName: job.repository }, organization: owner, enterprise: undefined };
    const first = this.#o.poolCache
      .list()
      .filter((p) => this.#listingIntervalMs(p as Readonly<Stored<ImpVMRunnerPool>>) !== undefined && p.metadata.deletionTimestamp === undefined && poolTakesJob(p as Readonly<Stored<ImpVMRunnerPool>>, asDelivered))
      .map((p) => keyOf(p))
      .sort()[0];
    return first === poolKey;
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const pool = this.#o.poolCache.get(ctx.key) as Readonly<Stored<ImpVMRunnerPool>> | undefined;
    if (pool === undefined) {
      this.expectations.forget(ctx.key);
      this.activity.forgetPool(ctx.key);
      this.#failures.delete(ctx.key);
      this.#github.delete(ctx.key);
      this.#demandListedAt.delete(ctx.key);
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
    await this.#refreshRunners(ctx, pool, vms, pending.creating);
    await this.#refreshDemand(ctx, pool, vms);
    // A restarted operator (or a new leader) takes the budget up from the pool's status, not from zero.
    const failures = this.#failures.get(ctx.key) ?? restoreFailures(pool.status?.failureBudget, pool.metadata.generation);
    const decision = decidePool({
      minIdle: pool.spec.minIdle,
      maxConcurrent: pool.spec.maxConcurrent,
      scaleUpStep: pool.spec.scaleUpStep,
      generation: pool.metadata.generation,
      vms: vms.map((vm) => this.#view(vm)),
      creating: pending.creating,
      deletingExpected: pending.deleting,
      queuedJobs: this.#queuedJobs(ctx.key, pool),
      failures,
      policy: this.#policy,
      now,
    });
    const before = failures.consecutive;
    this.#failures.set(ctx.key, decision.failures);
    await this.#act(ctx, pool, vms, decision, before);
    await this.#writeStatus(ctx, pool, decision);

    const github = this.#github.get(ctx.key);
    const untilList = github === undefined ? 0 : Math.max(1_000, github.at + this.#listIntervalMs - now);
    const untilHold = decision.holdUntil === undefined ? Infinity : Math.max(100, decision.holdUntil - now);
    const listedAt = this.#demandListedAt.get(ctx.key);
    const listEvery = this.#listingIntervalMs(pool);
    const untilDemand = listEvery === undefined || listedAt === undefined ? Infinity : Math.max(500, listedAt + listEvery - now);
    return requeueAfter(Math.min(untilList, untilHold, untilDemand));
  }

  /** Scale sets: assigned and not yet running, as GitHub last counted; otherwise the jobs heard of or listed. */
  #queuedJobs(key: string, pool: Readonly<Stored<ImpVMRunnerPool>>): number {
    if (pool.spec.github?.scaleSet === undefined) return this.activity.queuedJobs(key);
    const stats = this.#o.scaleSets?.view(key)?.statistics;
    return stats === undefined ? 0 : Math.max(0, stats.totalAssignedJobs - stats.totalRunningJobs);
  }

  #vmsOf(pool: Readonly<Stored<ImpVMRunnerPool>>): Readonly<Stored<ImpVM>>[] {
    return this.#o.vmCache
      .byIndex(POOL_VM_INDEX, pool.metadata.name)
      .filter((vm) => vm.metadata.namespace === pool.metadata.namespace && (vm.metadata.ownerReferences ?? []).some((o) => o.uid === pool.metadata.uid)) as Readonly<Stored<ImpVM>>[];
  }

  #view(vm: Readonly<Stored<ImpVM>>): PoolVmView {
    const name = vm.metadata.name;
    return {
      name,
      uid: vm.metadata.uid,
      phase: vm.status?.phase,
      deleting: vm.metadata.deletionTimestamp !== undefined,
      busy: this.activity.isBusy(name),
      finished: this.activity.isFinished(name),
      bound: vm.status?.nodeName !== undefined,
      draining: vm.status?.nodeName !== undefined && (this.#o.cordoned?.(vm.status.nodeName) ?? false),
      createdAt: ms(vm.metadata.creationTimestamp) ?? 0,
      runningAt: ms(vm.status?.phaseTimestamps?.running),
      failedAt: ms(vm.status?.phaseTimestamps?.failed),
    };
  }

  /** GitHub's runner list, at most once per interval: confirms busy flags and finds orphaned registrations. */
  async #refreshRunners(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, vms: readonly Readonly<Stored<ImpVM>>[], creating: readonly string[]): Promise<void> {
    const last = this.#github.get(ctx.key);
    const startedAt = this.#clock.now();
    if (last !== undefined && startedAt - last.at < this.#listIntervalMs) return;
    const ours = vmNamePattern(pool.metadata.name);
    try {
      const forge = await this.#o.forges.forPool(pool, ctx.signal);
      const runners = (await forge.listRunners(`${pool.metadata.name}-`, ctx.signal)).filter((r) => ours.test(r.name));
      this.activity.runnersListed(runners, startedAt);
      const known = new Set([...vms.map((vm) => vm.metadata.name), ...creating]);
      this.activity.forgetRunnersExcept(known, `${pool.metadata.name}-`);
      // A registration named like our VMs with no VM: left by a crash before its VM was recorded,
      // or by a VM deleted behind our back. It can take no job of ours; remove it.
      for (const orphan of runners.filter((r) => !known.has(r.name) && !r.busy)) {
        const result = await forge.removeRunner(orphan.name, orphan.id, ctx.signal);
        ctx.logger.info({ runner: orphan.name, id: orphan.id, result }, "removed a runner registration without a VM");
      }
      this.#github.set(ctx.key, { at: startedAt, ok: true, message: `Listed ${runners.length} runners of this pool on GitHub` });
    } catch (err) {
      this.#github.set(ctx.key, { at: startedAt, ok: false, message: describeError(err).slice(0, 1000) });
      ctx.logger.warn({ err: describeError(err) }, "cannot list the pool's runners on GitHub");
    }
  }

  async #act(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, vms: readonly Readonly<Stored<ImpVM>>[], d: PoolDecision, failuresBefore: number): Promise<void> {
    const byName = new Map(vms.map((vm) => [vm.metadata.name, vm]));
    for (const name of d.removeTerminal) {
      const vm = byName.get(name);
      if (vm !== undefined) await this.#deleteVm(ctx, vm);
    }
    let scaledDown = 0;
    for (const name of d.scaleDown) {
      const vm = byName.get(name);
      if (vm === undefined) continue;
      const runnerId = vm.status?.runner?.id;
      if (runnerId !== undefined) {
        // Deregister first: a runner gone from GitHub can no longer be handed a job while its VM stops.
        const forge = await this.#o.forges.forPool(pool, ctx.signal);
        if ((await forge.removeRunner(name, runnerId, ctx.signal)) === "busy") {
          this.activity.runnerBusy(name, true);
          continue;
        }
      } else if (vm.status?.nodeName !== undefined) {
        continue; // bound and being set up right now: let it finish and become idle first
      }
      await this.#deleteVm(ctx, vm);
      scaledDown++;
    }
    if (scaledDown > 0) await this.#event(ctx, pool, "Normal", "ScaledDown", `Deleted ${scaledDown} idle runner VM(s); desired ${d.counts.desired}`);
    let created = 0;
    for (let i = 0; i < d.create; i++) {
      await (this.#o.faults ?? NO_FAULTS).hit("pool.before-replace", ctx.signal);
      const vm = await this.#o.vms.create(this.#newVm(pool), ctx.signal);
      this.expectations.expectCreated(ctx.key, vm.metadata.name);
      created++;
    }
    if (created > 0) await this.#event(ctx, pool, "Normal", "ScaledUp", `Created ${created} runner VM(s); desired ${d.counts.desired}, idle ${d.counts.idle}, busy ${d.counts.busy}, starting ${d.counts.starting}`);
    if (d.failures.consecutive > failuresBefore) {
      const wait = d.holdUntil === undefined ? 0 : Math.round((d.holdUntil - this.#clock.now()) / 1000);
      await this.#event(ctx, pool, "Warning", d.budgetExhausted ? "FailureBudgetExhausted" : "StartFailureBackoff", `${d.failures.consecutive} VM(s) in a row failed before their runner started; next VM in ${wait} s`);
    }
  }

  #newVm(pool: Readonly<Stored<ImpVMRunnerPool>>): ImpVM {
    const name = pool.metadata.name;
    return {
      apiVersion: API_VERSION,
      kind: "ImpVM",
      metadata: {
        generateName: `${name}-`,
        namespace: pool.metadata.namespace ?? "",
        labels: { [LABELS.pool]: name, [LABELS.managedBy]: "imp-operator" },
        ownerReferences: [{ apiVersion: API_VERSION, kind: IMP_VM_RUNNER_POOL.kind, name, uid: pool.metadata.uid, controller: true, blockOwnerDeletion: true }],
        // Set at creation, so no registration can ever exist for a VM without it.
        finalizers: [FINALIZERS.runnerRegistration],
      },
      spec: {
        templateRef: { name: pool.spec.templateName },
        workload: { command: [...pool.spec.runnerCommand], ...(pool.spec.runnerEnv === undefined ? {} : { env: pool.spec.runnerEnv.map((e) => ({ ...e })) }) },
        lifecycle: "ephemeral",
        runnerSetup: "Required",
        ...(pool.spec.runnerSetupDelivery === undefined ? {} : { runnerSetupDelivery: pool.spec.runnerSetupDelivery }),
      },
    } as ImpVM;
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
    for (const vm of vms) if (vm.metadata.deletionTimestamp === undefined) await this.#deleteVm(ctx, vm);
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

  async #writeStatus(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, d: PoolDecision): Promise<void> {
    const now = this.#clock.now();
    const github = this.#github.get(ctx.key);
    const scaled = d.create > 0 || d.scaleDown.length > 0;
    const queued = this.#queuedJobs(ctx.key, pool);
    const build = (old: Readonly<ImpVMRunnerPoolStatus>, generation: number | undefined): ImpVMRunnerPoolStatus => {
      const listener = pool.spec.github?.scaleSet === undefined ? undefined : this.#o.scaleSets?.view(ctx.key);
      const wanted = poolConditions({
        forge: github,
        decision: d,
        listener: pool.spec.github?.scaleSet === undefined ? undefined : listener === undefined ? "none-yet" : { reason: listener.reason, message: listener.message },
        maxConcurrent: pool.spec.maxConcurrent,
        capMs: this.#policy.capMs,
      });
      let conditions = (old.conditions ?? []).filter((c) => !wanted.remove.includes(c.type));
      for (const c of wanted.set) conditions = setCondition(conditions, c, now, generation);
      const { failureBudget: _previousBudget, scaleSet: previousScaleSet, ...rest } = old;
      const budget = failureBudgetStatus(d.failures, this.#policy);
      const scaleSet = scaleSetStatus(pool, listener, previousScaleSet);
      const next: ImpVMRunnerPoolStatus = {
        ...rest,
        ...(budget === undefined ? {} : { failureBudget: budget }),
        ...(scaleSet === undefined ? {} : { scaleSet }),
        queuedJobs: queued,
        ...(generation === undefined ? {} : { observedGeneration: generation }),
        ...d.counts,
        conditions,
        ...(scaled ? { lastScaleTime: new Date(now).toISOString().replace(/\.\d{3}Z$/, "Z") } : {}),
      };
      return next;
    };
    // Most reconciles change nothing: seen from the cache, that costs no request at all (the
    // GET that mutateWithRetry starts with was ~7 reads per VM lifecycle in bench:operator). A
    // stale cache only delays a write to the reconcile its own update triggers.
    const cached = (pool.status ?? {}) as Readonly<ImpVMRunnerPoolStatus>;
    if (jsonEqual(build(cached, pool.metadata.generation), cached)) return;
    await mutateWithRetry(this.#o.pools, {
      ref: { namespace: pool.metadata.namespace, name: pool.metadata.name },
      subresource: "status",
      signal: ctx.signal,
      mutate: (draft) => {
        const old = draft.status ?? {};
        const next = build(old, draft.metadata.generation);
        if (jsonEqual(next, old)) return false;
        draft.status = next;
      },
    });
  }

  async #event(ctx: ReconcileContext, pool: Readonly<Stored<ImpVMRunnerPool>>, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    await this.#o.recorder.record(pool, { type, reason, message, signal: ctx.signal });
  }
}

/** status.scaleSet: the listener's latest word, else what the status said (a restarted operator keeps the recorded session until its listener opens a new one). */
function scaleSetStatus(pool: Readonly<Stored<ImpVMRunnerPool>>, view: ScaleSetPoolView | undefined, previous: ScaleSetStatus | undefined): ScaleSetStatus | undefined {
  const name = pool.spec.github?.scaleSet?.name;
  if (name === undefined) return undefined;
  const kept = previous?.name === name ? previous : undefined;
  const id = view?.scaleSetId ?? kept?.id;
  if (id === undefined) return undefined;
  const sessionId = view === undefined ? kept?.sessionId : view.sessionId;
  const stats = view?.statistics;
  return {
    id,
    name,
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(stats === undefined ? (kept?.assignedJobs === undefined ? {} : { assignedJobs: kept.assignedJobs, runningJobs: kept.runningJobs ?? 0 }) : { assignedJobs: stats.totalAssignedJobs, runningJobs: stats.totalRunningJobs }),
  };
}
