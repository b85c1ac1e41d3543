export { PoolController, type PoolControllerOptions } from "./pool-controller.ts";
export { DEFAULT_RUNNER_LIST_INTERVAL_MS } from "./runner-registrations.ts";
export { waitsForCapacity } from "./runner-vm.ts";
export { decidePool, updateFailures, failureBackoffMs, DEFAULT_FAILURE_BUDGET, NO_FAILURES, type FailureBudgetPolicy, type FailureState, type PoolDecision, type PoolObservation, type PoolVmView, type PoolCounts } from "./pool-decision.ts";
export { PoolExpectations, DEFAULT_EXPECTATION_TTL_MS } from "./expectations.ts";
export { IMP_VMS, IMP_VM_RUNNER_POOLS, IMP_NODES, SECRETS, type SecretObject } from "../resources.ts";
