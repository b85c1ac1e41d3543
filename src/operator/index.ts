/**
 * The Imp operator: runner pools (ImpVMRunnerPool → ImpVMs), the one-time runner setup sealed to
 * the bound node, GitHub registration removal, and the webhook receiver. Other parts import only from here.
 */
export { Operator, OPERATOR_LEASE_NAME, type OperatorOptions } from "./operator.ts";
export * from "./pools/index.ts";
export * from "./setup/index.ts";
export * from "./webhook/index.ts";
