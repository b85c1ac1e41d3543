// How a pool learns that jobs wait for it and hears its runners start and finish (demand-source.ts).
export { PoolDemand, DEFAULT_DEMAND_LIST_INTERVAL_MS, DEFAULT_QUEUE_LIST_INTERVAL_MS, type PoolDemandOptions } from "./pool-demand.ts";
export { DemandEvents, type DemandListener } from "./demand-events.ts";
export { demandKindOf, DEMAND_KINDS, type DemandKind, type DemandSource } from "./demand-source.ts";
export { DEMAND_RESULTS } from "./demand-tally.ts";
export { RunnerActivity, DEFAULT_QUEUED_JOB_TTL_MS } from "./runner-activity.ts";
export { isPoolRunner, poolRunnerPattern } from "./runner-names.ts";
export type { ScaleSetPoolView, ScaleSetViews } from "./scale-set-demand.ts";
export { jobsWaitingForCapacity } from "./scale-set-demand.ts";
export type { DemandAudience } from "./webhook-demand.ts";
