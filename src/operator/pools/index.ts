export { PoolController, DEFAULT_RUNNER_LIST_INTERVAL_MS, type PoolControllerOptions } from "./pool-controller.ts";
export { decidePool, updateFailures, failureBackoffMs, DEFAULT_FAILURE_BUDGET, NO_FAILURES, type FailureBudgetPolicy, type FailureState, type PoolDecision, type PoolObservation, type PoolVmView, type PoolCounts } from "./pool-decision.ts";
export { PoolExpectations, DEFAULT_EXPECTATION_TTL_MS } from "./expectations.ts";
export { RunnerActivity, DEFAULT_QUEUED_JOB_TTL_MS } from "./runner-activity.ts";
export { poolTakesJob, scopeOfPool } from "./pool-scope.ts";
export { IMP_VMS, IMP_VM_RUNNER_POOLS, IMP_NODES, SECRETS, type SecretObject } from "./resources.ts";
