/**
 * The closed list of error codes the shared utilities (deadlines, retries, child processes) raise (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */

export const SHARED_ERROR_CODES = [
  "FaultInjected",
  "FaultPlanInvalid",
  "SpawnFailed",
  "Timeout",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof SHARED_ERROR_CODES)[number], true> {}
}
