export { JobObserver, VM_NAME_INDEX, type JobObserverOptions } from "./job-observer.ts";
export { ARC_JOB_BUCKETS, ARC_METRICS, ARC_JOB_LABELS, ARC_COMPLETED_JOB_LABELS, ARC_SCALE_SET_LABELS, SCALE_SET_LABELS, ArcJobMetrics, type ArcJobLabels, type ArcCompletedJobLabels, type ArcPoolSample } from "./arc-metrics.ts";
export { arcJobLabels, arcJobResult, decideJobObservation, jobKey, type JobObservation, type JobSeen, type PoolRef } from "./job-decision.ts";
export { IMP_JOB_METRICS, IMP_STEP_BUCKETS, VmStepMetrics } from "./step-metrics.ts";
export { VM_POINTS, VM_STEPS, vmPoints, vmSteps, stepStart, type VmPoint, type VmPoints, type VmStep } from "./vm-points.ts";
export { jobTimeline, formatJobTimeline, findReplacement, TIMELINE_POINTS, TIMELINE_LABELS, type JobTimeline, type JobTimes, type TimelinePoint, type TimelinePointName } from "./timeline.ts";
