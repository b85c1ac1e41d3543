/**
 * The closed list of error codes the local control plane raises (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */

export const DEVCLUSTER_ERROR_CODES = [
  "BinaryMissing",
  "ClusterRunning",
  "ComponentExited",
  "DirNotEmpty",
  "PortClash",
  "Timeout",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof DEVCLUSTER_ERROR_CODES)[number], true> {}
}
