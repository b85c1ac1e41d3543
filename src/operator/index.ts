/**
 * The Imp operator: runner pools (ImpVMRunnerPool → ImpVMs), the one-time runner setup sealed to
 * the bound node, GitHub registration removal, the webhook receiver, the scheduler and node-loss handling. Other parts import only from here.
 */
export { Operator, OPERATOR_LEASE_NAME, DEFAULT_AGENT_LEASE_NAMESPACE, type OperatorOptions } from "./operator.ts";
export * from "./pools/index.ts";
export * from "./setup/index.ts";
export * from "./webhook/index.ts";
export * from "./scheduler/index.ts";
export * from "./nodes/index.ts";
export * from "./jobs/index.ts";
export * from "./scale-sets/index.ts";
export * from "./uninstall/index.ts";
export * from "./caches/index.ts";
export { OPERATOR_ERROR_CODES } from "./error-codes.ts";
