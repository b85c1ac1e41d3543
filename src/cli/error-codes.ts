/**
 * The closed list of error codes the `imp` command raises (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */

export const CLI_ERROR_CODES = [
  "BootKitInvalid",
  "GuestAgentMissing",
  "InvalidFlag",
  "KernelMissing",
  "KvmUnavailable",
  "RunFailed",
  "RunInterrupted",
  "RunInvalid",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof CLI_ERROR_CODES)[number], true> {}
}
