/**
 * The closed list of error codes the API part (kinds, CRDs, sealed setups, units) raise (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */

export const API_ERROR_CODES = [
  "IllegalPhaseTransition",
  "InvalidDuration",
  "InvalidSize",
  "NoWorkload",
  "SetupKeyInvalid",
  "SetupOpenFailed",
  "SetupSealedInvalid",
  "SetupSealedToOtherKey",
  "TemplateNotFound",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof API_ERROR_CODES)[number], true> {}
}
