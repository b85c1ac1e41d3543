/**
 * A scale-set job message as the `workflow_job` event the job observer already understands, so
 * one decision (job-decision.ts) counts jobs of both modes, and a JobStarted redelivered after a
 * crash counts once, like a redelivered webhook. JobAvailable and JobAssigned say nothing about a
 * runner; a JobCompleted without a runner (a job offered again, or cancelled before a runner took
 * it) says nothing about one either.
 */
import type { JobMessage, WorkflowJobEvent } from "../../forge/index.ts";

const CONCLUSIONS: Readonly<Record<string, string>> = { succeeded: "success", failed: "failure", canceled: "cancelled" };

export function workflowJobEventOf(job: JobMessage): WorkflowJobEvent | undefined {
  if ((job.messageType !== "JobStarted" && job.messageType !== "JobCompleted") || job.runnerName === "") return undefined;
  const completed = job.messageType === "JobCompleted";
  const owner = job.ownerName;
  const at = (name: "createdAt" | "startedAt" | "completedAt" | "assignedAt", ms: number | undefined): Partial<WorkflowJobEvent> => (ms === undefined ? {} : { [name]: ms });
  return {
    deliveryId: `scale-set-${job.runnerRequestId}-${job.messageType}`,
    action: completed ? "completed" : "in_progress",
    jobId: job.runnerRequestId,
    runId: job.workflowRunId,
    runAttempt: 1,
    jobName: job.jobDisplayName,
    labels: job.requestLabels,
    runnerName: job.runnerName,
    runnerId: job.runnerId,
    runnerGroupName: null,
    conclusion: completed ? (CONCLUSIONS[job.result] ?? job.result) : null,
    repository: { owner, name: job.repositoryName, fullName: `${owner}/${job.repositoryName}` },
    organization: owner,
    enterprise: undefined,
    installationId: undefined,
    eventName: job.eventName,
    ...at("createdAt", job.queueTime),
    ...at("startedAt", job.runnerAssignTime),
    ...at("completedAt", job.finishTime),
    ...at("assignedAt", job.scaleSetAssignTime),
  };
}
