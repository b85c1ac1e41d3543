/**
 * The job metrics of actions-runner-controller's (ARC) listener, with ARC's names, label names,
 * default label sets and default buckets, so dashboards and alerts built for ARC read Imp's
 * operator unchanged (docs/operator.md, "Metrics a dashboard built for ARC reads").
 *
 * What differs, and why: ARC runs one listener per scale set and Prometheus adds the listener
 * pod's labels (`actions.github.com/scale-set-name` → `actions_github_com_scale_set_name`, and the
 * namespace) to its series; one Imp operator serves every pool, so it puts those two labels on the
 * series itself. Everything else is ARC's default label set; `event_name` stays empty because a
 * `workflow_job` webhook does not carry it (ARC reads it from the Actions message broker).
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** ARC's `defaultRuntimeBuckets` (seconds), for both job histograms. */
export const ARC_JOB_BUCKETS: readonly number[] = [
  0.01, 0.05, 0.1, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 18, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 150, 180, 210, 240, 300, 360, 420, 480,
  540, 600, 900, 1200, 1800, 2400, 3000, 3600,
];

export const ARC_METRICS = {
  startedJobs: "gha_started_jobs_total",
  completedJobs: "gha_completed_jobs_total",
  jobStartup: "gha_job_startup_duration_seconds",
  jobExecution: "gha_job_execution_duration_seconds",
  /** Not in ARC (asked for in ARC issue #4431): queued to taken by a runner, whatever acquired it. */
  jobQueue: "gha_job_queue_duration_seconds",
  assignedJobs: "gha_assigned_jobs",
  /** Not in ARC: jobs waiting for a runner (assigned and not running; webhook pools: queued demand). */
  queuedJobs: "gha_queued_jobs",
  minRunners: "gha_min_runners",
  maxRunners: "gha_max_runners",
  desiredRunners: "gha_desired_runners",
  idleRunners: "gha_idle_runners",
  busyRunners: "gha_busy_runners",
  registeredRunners: "gha_registered_runners",
  runningJobs: "gha_running_jobs",
} as const;

/** The labels Prometheus would add from an ARC listener pod; Imp sets them (pool name, pool namespace). */
export const SCALE_SET_LABELS = ["actions_github_com_scale_set_name", "actions_github_com_scale_set_namespace"] as const;
/** ARC's default labels of gha_started_jobs_total and gha_job_startup_duration_seconds. */
export const ARC_JOB_LABELS = ["enterprise", "organization", "repository", "job_name", "event_name"] as const;
/** ARC's default labels of gha_completed_jobs_total and gha_job_execution_duration_seconds. */
export const ARC_COMPLETED_JOB_LABELS = [...ARC_JOB_LABELS, "job_result"] as const;
/** ARC's default labels of the scale-set gauges (`name`, `namespace` = the scale set, here the pool). */
export const ARC_SCALE_SET_LABELS = ["name", "namespace", "repository", "organization", "enterprise"] as const;

export type ArcJobLabels = Record<(typeof ARC_JOB_LABELS)[number] | (typeof SCALE_SET_LABELS)[number], string>;
export type ArcCompletedJobLabels = ArcJobLabels & { job_result: string };

/** One pool as the scale-set gauges show it. */
export interface ArcPoolSample {
  readonly labels: Record<(typeof ARC_SCALE_SET_LABELS)[number] | (typeof SCALE_SET_LABELS)[number], string>;
  readonly minRunners: number;
  readonly maxRunners: number;
  readonly desired: number;
  readonly idle: number;
  readonly busy: number;
  /** Scale-set pools: the scale set's statistics as GitHub counts them; webhook pools: the operator's own count. */
  readonly assigned: number;
  readonly running: number;
  readonly registered: number;
  readonly queued: number;
}

export class ArcJobMetrics {
  readonly #started: Counter;
  readonly #completed: Counter;
  readonly #startup: Histogram;
  readonly #execution: Histogram;
  readonly #queue: Histogram;

  /** `pools` is read at every scrape for the scale-set gauges. */
  constructor(registry: Registry, pools: () => readonly ArcPoolSample[]) {
    const jobLabels = [...ARC_JOB_LABELS, ...SCALE_SET_LABELS];
    const completedLabels = [...ARC_COMPLETED_JOB_LABELS, ...SCALE_SET_LABELS];
    const registers = [registry];
    this.#started = new Counter({ name: ARC_METRICS.startedJobs, help: "Jobs a runner of an Imp pool started (workflow_job in_progress).", labelNames: jobLabels, registers });
    this.#completed = new Counter({ name: ARC_METRICS.completedJobs, help: "Jobs a runner of an Imp pool completed (workflow_job completed).", labelNames: completedLabels, registers });
    this.#startup = new Histogram({
      name: ARC_METRICS.jobStartup,
      help: "Seconds from a job being queued (created_at) to a runner of an Imp pool starting it (started_at).",
      labelNames: jobLabels,
      buckets: [...ARC_JOB_BUCKETS],
      registers,
    });
    this.#execution = new Histogram({
      name: ARC_METRICS.jobExecution,
      help: "Seconds a runner of an Imp pool spent on a job (started_at to completed_at).",
      labelNames: completedLabels,
      buckets: [...ARC_JOB_BUCKETS],
      registers,
    });
    this.#queue = new Histogram({
      name: ARC_METRICS.jobQueue,
      help: "Seconds a job waited from being queued on GitHub to a runner of an Imp pool taking it (not an ARC metric; ARC issue #4431).",
      labelNames: jobLabels,
      buckets: [...ARC_JOB_BUCKETS],
      registers,
    });
    const gaugeLabels = [...ARC_SCALE_SET_LABELS, ...SCALE_SET_LABELS];
    const gauge = (name: string, help: string, value: (p: ArcPoolSample) => number): void => {
      new Gauge({
        name,
        help,
        labelNames: gaugeLabels,
        registers,
        collect() {
          this.reset();
          for (const p of pools()) this.set(p.labels, value(p));
        },
      });
    };
    gauge(ARC_METRICS.minRunners, "The pool's minIdle.", (p) => p.minRunners);
    gauge(ARC_METRICS.maxRunners, "The pool's maxConcurrent.", (p) => p.maxRunners);
    gauge(ARC_METRICS.desiredRunners, "Runner VMs the pool wants (status.desired).", (p) => p.desired);
    gauge(ARC_METRICS.idleRunners, "Runners online and waiting for a job (status.idle).", (p) => p.idle);
    gauge(ARC_METRICS.busyRunners, "Runners running a job (status.busy).", (p) => p.busy);
    gauge(ARC_METRICS.registeredRunners, "Runners registered by the pool (scale sets: GitHub's count; otherwise idle + busy).", (p) => p.registered);
    gauge(ARC_METRICS.runningJobs, "Jobs running on the pool's runners (scale sets: GitHub's count; otherwise status.busy).", (p) => p.running);
    gauge(ARC_METRICS.assignedJobs, "Jobs assigned to the pool and not completed: waiting for a runner or running (scale sets: GitHub's totalAssignedJobs).", (p) => p.assigned);
    gauge(ARC_METRICS.queuedJobs, "Jobs waiting for a runner of the pool (not an ARC metric).", (p) => p.queued);
  }

  /** ARC's RecordJobStarted: count, and the startup (and queue) time when both ends are known. */
  jobStarted(labels: ArcJobLabels, startupSeconds: number | undefined, queueSeconds?: number): void {
    this.#started.inc(labels);
    if (startupSeconds !== undefined) this.#startup.observe(labels, startupSeconds);
    if (queueSeconds !== undefined) this.#queue.observe(labels, queueSeconds);
  }

  /** ARC's RecordJobCompleted (called only for a job a runner took, as ARC does). */
  jobCompleted(labels: ArcCompletedJobLabels, executionSeconds: number | undefined): void {
    this.#completed.inc(labels);
    if (executionSeconds !== undefined) this.#execution.observe(labels, executionSeconds);
  }
}
