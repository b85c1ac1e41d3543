/**
 * Pure: what one `workflow_job` webhook about a runner of an Imp pool means for the ARC-named
 * metrics and the ImpVM's Events. The receiver already drops repeated delivery ids; this also
 * remembers which transitions of a job (id + attempt) were counted, so a redelivery with a new
 * id, or a delivery id the receiver's bounded memory forgot, never counts twice. A `completed`
 * whose `in_progress` was lost still counts the start first (started ≥ completed always holds).
 */
import type { WorkflowJobEvent } from "../../forge/index.ts";
import type { EventToRecord } from "../../kube/index.ts";
import type { ArcCompletedJobLabels, ArcJobLabels } from "./arc-metrics.ts";

/** The pool a job's runner belongs to, as its labels need it. */
export interface PoolRef {
  readonly name: string;
  readonly namespace: string;
  /** The pool's enterprise when it registers runners for an enterprise (ARC: the configured enterprise). */
  readonly enterprise: string | undefined;
}

export interface JobSeen {
  readonly started: boolean;
  readonly completed: boolean;
}

export interface JobObservation {
  /** startup: from the scale set's acquisition (scale sets) or the queueing (webhooks) to a runner taking the job, as ARC measures it; queue: from the queueing, always. */
  readonly started?: { readonly labels: ArcJobLabels; readonly startupSeconds: number | undefined; readonly queueSeconds: number | undefined; readonly event: EventToRecord };
  readonly completed?: { readonly labels: ArcCompletedJobLabels; readonly executionSeconds: number | undefined; readonly event: EventToRecord };
  readonly seen: JobSeen;
}

export const jobKey = (event: Pick<WorkflowJobEvent, "jobId" | "runAttempt">): string => `${event.jobId}/${event.runAttempt}`;

/** GitHub's webhook conclusion in the words of ARC's listener (`job_result="succeeded"`); others as they are. */
export function arcJobResult(conclusion: string | null): string {
  switch (conclusion) {
    case "success":
      return "succeeded";
    case "failure":
      return "failed";
    case "cancelled":
      return "canceled";
    default:
      return conclusion ?? "";
  }
}

export function arcJobLabels(event: WorkflowJobEvent, pool: PoolRef): ArcJobLabels {
  return {
    enterprise: pool.enterprise ?? "",
    organization: event.repository.owner,
    repository: event.repository.name,
    job_name: event.jobName,
    event_name: event.eventName ?? "",
    actions_github_com_scale_set_name: pool.name,
    actions_github_com_scale_set_namespace: pool.namespace,
  };
}

const seconds = (fromMs: number | undefined, toMs: number | undefined): number | undefined =>
  fromMs === undefined || toMs === undefined ? undefined : Math.max(0, toMs - fromMs) / 1000;

const jobRef = (e: WorkflowJobEvent): string => `Job "${e.jobName}" of ${e.repository.fullName} (run ${e.runId}, attempt ${e.runAttempt}, job ${e.jobId})`;

const took = (s: number | undefined, what: string): string => (s === undefined ? "" : `; ${s.toFixed(s < 10 ? 1 : 0)} s ${what}`);

/** in_progress and completed only; `queued` changes nothing here (ARC counts no queued jobs either). */
export function decideJobObservation(event: WorkflowJobEvent, pool: PoolRef, seen: JobSeen | undefined): JobObservation {
  const before = seen ?? { started: false, completed: false };
  if (event.action === "queued") return { seen: before };
  const labels = arcJobLabels(event, pool);
  const wantStart = !before.started && !before.completed;
  const queueSeconds = seconds(event.createdAt, event.startedAt);
  const startupSeconds = seconds(event.assignedAt ?? event.createdAt, event.startedAt);
  const started = wantStart
    ? {
        labels,
        startupSeconds,
        queueSeconds,
        event: { type: "Normal" as const, reason: "JobStarted", message: `${jobRef(event)} started on runner ${event.runnerName ?? ""}${took(queueSeconds, "after it was queued")}` },
      }
    : undefined;
  if (event.action === "in_progress") return { ...(started === undefined ? {} : { started }), seen: { started: true, completed: before.completed } };
  if (before.completed) return { seen: before };
  const executionSeconds = seconds(event.startedAt, event.completedAt);
  const result = arcJobResult(event.conclusion);
  const completed = {
    labels: { ...labels, job_result: result },
    executionSeconds,
    event: { type: "Normal" as const, reason: "JobCompleted", message: `${jobRef(event)} completed: ${event.conclusion ?? "no conclusion"}${took(executionSeconds, "on the runner")}` },
  };
  return { ...(started === undefined ? {} : { started }), completed, seen: { started: true, completed: true } };
}
