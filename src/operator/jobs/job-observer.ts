/**
 * What a person sees of each CI job, observed by the operator: the ARC-named job metrics and the
 * JobStarted / JobCompleted Events on the job's ImpVM from `workflow_job` webhooks, ARC's scale-set
 * gauges from the pools, and Imp's per-step VM histograms from ImpVM status. Only jobs whose
 * runner is an ImpVM of a pool count (runner_name = the VM's name), as ARC counts only its own
 * scale set's jobs. Webhook handling stays synchronous and in memory; Events are written in the
 * background and never fail anything (the recorder is best effort).
 */
import { LABELS, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import type { JobMessage, WorkflowJobEvent } from "../../forge/index.ts";
import type { Cached, EventRecorder, Informer, InvolvedObject } from "../../kube/index.ts";
import { describeError, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import type { WebhookAudience } from "../webhook/index.ts";
import { forgeOf, poolOwner, type ForgeFamily } from "../forges/index.ts";
import type { Registry } from "prom-client";
import { ArcJobMetrics, type ArcPoolSample } from "./arc-metrics.ts";
import { decideJobObservation, jobKey, type JobSeen, type PoolRef } from "./job-decision.ts";
import { VmStepMetrics } from "./step-metrics.ts";
import { workflowJobEventOf } from "./scale-set-job-event.ts";

/** Index of the VM cache by metadata.name: a webhook names the runner, which is the VM's name. */
export const VM_NAME_INDEX = "imp-operator/vm-by-name";
const DEFAULT_MAX_JOBS = 10_000;

export interface JobObserverOptions {
  readonly vmCache: Informer<ImpVM>;
  readonly poolCache: Informer<ImpVMRunnerPool>;
  readonly recorder: Pick<EventRecorder, "record">;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly clock?: Clock;
  /** Jobs remembered (what was counted, which VM ran them); oldest forgotten first. */
  readonly maxJobs?: number;
}

interface KnownJob {
  readonly seen: JobSeen;
  readonly pool: PoolRef;
  readonly vm: InvolvedObject;
}

export class JobObserver {
  readonly arc: ArcJobMetrics;
  readonly steps: VmStepMetrics;
  readonly #o: JobObserverOptions;
  readonly #jobs = new Map<string, KnownJob>();
  readonly #pending = new Set<Promise<void>>();

  constructor(options: JobObserverOptions) {
    this.#o = options;
    const clock = options.clock ?? systemClock;
    this.arc = new ArcJobMetrics(options.registry, () => options.poolCache.list().map(poolSample));
    this.steps = new VmStepMetrics(options.registry, clock.now());
    options.vmCache.addIndex(VM_NAME_INDEX, (vm) => [vm.metadata.name]);
    options.vmCache.addEventHandler({
      onAdd: (vm) => this.steps.observe(vm),
      onUpdate: (_old, vm) => this.steps.observe(vm),
      onDelete: (vm) => this.steps.forget(vm.metadata.uid),
    });
  }

  /**
   * Called with every accepted workflow_job delivery (after the receiver's delivery-id check).
   * `audience`: the pools whose webhook secret signed it; a delivery counts only for those.
   * `forge`: whose delivery it is — each forge numbers its jobs itself, so a job is known by both,
   * and only a runner of a pool of that forge can have run it.
   */
  onWorkflowJob(event: WorkflowJobEvent, audience: WebhookAudience = "all", forge: ForgeFamily = "github"): void {
    try {
      this.#observe(event, audience, forge);
    } catch (err) {
      // Observing must never fail a delivery (a 5xx would make GitHub redeliver it to the pools too).
      this.#o.logger.warn({ err: describeError(err), job: event.jobId }, "could not observe a workflow_job event");
    }
  }

  /** A JobStarted or JobCompleted from the scale-set listener of `poolKey` (which vouches for that pool only). */
  onScaleSetJob(poolKey: string, job: JobMessage): void {
    const event = workflowJobEventOf(job);
    if (event !== undefined) this.onWorkflowJob(event, new Set([poolKey]));
  }

  #observe(event: WorkflowJobEvent, audience: WebhookAudience, forge: ForgeFamily): void {
    if (event.action === "queued" || event.runnerName === null) return;
    const key = `${forge}/${jobKey(event)}`;
    const known = this.#jobs.get(key);
    const runner = known ?? this.#runnerOf(event, forge);
    if (runner === undefined) return; // not a runner of an Imp pool
    // A pool's own secret vouches for that pool only: it cannot start or end jobs in another's metrics.
    if (audience !== "all" && !audience.has(`${runner.pool.namespace}/${runner.pool.name}`)) return;
    const decision = decideJobObservation(event, runner.pool, known?.seen);
    this.#jobs.delete(key);
    this.#jobs.set(key, { ...runner, seen: decision.seen });
    while (this.#jobs.size > (this.#o.maxJobs ?? DEFAULT_MAX_JOBS)) this.#jobs.delete(this.#jobs.keys().next().value ?? "");
    if (decision.started !== undefined) {
      this.arc.jobStarted(decision.started.labels, decision.started.startupSeconds, decision.started.queueSeconds);
      this.#record(runner.vm, decision.started.event);
    }
    if (decision.completed !== undefined) {
      this.arc.jobCompleted(decision.completed.labels, decision.completed.executionSeconds);
      this.#record(runner.vm, decision.completed.event);
    }
  }

  /** Resolves once the Events recorded so far are written (or given up). */
  async settled(): Promise<void> {
    await Promise.all([...this.#pending]);
  }

  #record(vm: InvolvedObject, event: Parameters<EventRecorder["record"]>[1]): void {
    const p = this.#o.recorder.record(vm, event).finally(() => this.#pending.delete(p));
    this.#pending.add(p);
  }

  #runnerOf(event: WorkflowJobEvent, forge: ForgeFamily): Omit<KnownJob, "seen"> | undefined {
    const named = this.#o.vmCache.byIndex(VM_NAME_INDEX, event.runnerName ?? "").filter((vm) => vm.metadata.labels?.[LABELS.pool] !== undefined);
    // Two namespaces may hold a VM of the same name; the runner id GitHub reports tells them apart.
    const vm = named.length <= 1 ? named[0] : (named.find((v) => v.status?.runner?.id === event.runnerId) ?? undefined);
    if (vm === undefined) return undefined;
    const namespace = vm.metadata.namespace ?? "";
    const poolName = vm.metadata.labels?.[LABELS.pool] ?? "";
    const pool = this.#o.poolCache.get(`${namespace}/${poolName}`);
    if (pool !== undefined && forgeOf(pool) !== forge) return undefined;
    const enterprise = pool === undefined ? undefined : poolOwner(pool as Readonly<ImpVMRunnerPool>).enterprise || undefined;
    return { pool: { name: poolName, namespace, enterprise }, vm: involved(vm) };
  }
}

/** Just what an Event needs of the VM, so a remembered job does not keep a whole VM alive. */
function involved(vm: Cached<ImpVM>): InvolvedObject {
  return {
    apiVersion: vm.apiVersion,
    kind: vm.kind,
    metadata: { name: vm.metadata.name, namespace: vm.metadata.namespace, uid: vm.metadata.uid },
  };
}

function poolSample(pool: Cached<ImpVMRunnerPool>): ArcPoolSample {
  const owner = poolOwner(pool as Readonly<ImpVMRunnerPool>);
  const name = pool.metadata.name;
  const namespace = pool.metadata.namespace ?? "";
  const s = pool.status ?? {};
  return {
    labels: {
      name,
      namespace,
      repository: owner.repository,
      organization: owner.organization,
      enterprise: owner.enterprise,
      actions_github_com_scale_set_name: name,
      actions_github_com_scale_set_namespace: namespace,
    },
    minRunners: pool.spec.minIdle,
    maxRunners: pool.spec.maxConcurrent,
    desired: s.desired ?? 0,
    idle: s.idle ?? 0,
    busy: s.busy ?? 0,
    assigned: s.scaleSet?.assignedJobs ?? (s.queuedJobs ?? 0) + (s.busy ?? 0),
    running: s.scaleSet?.runningJobs ?? s.busy ?? 0,
    registered: (s.idle ?? 0) + (s.busy ?? 0),
    queued: s.queuedJobs ?? 0,
  };
}
