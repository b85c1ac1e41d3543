/**
 * The closed list of error codes the operator (scheduler, pools, setups, scale sets, webhooks) raise (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */

export const OPERATOR_ERROR_CODES = [
  "CredentialsSecretInvalid",
  "CredentialsSecretMissing",
  "DecommissionTimedOut",
  "ListenerError",
  "PoolSpecInvalid",
  "ReservationRefused",
  "RunnerGroupNotFound",
  "SetupAlreadyRecorded",
  "SetupVmEnded",
  "SetupVmReplaced",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof OPERATOR_ERROR_CODES)[number], true> {}
}
