/**
 * The closed list of error codes the forges behind the pool interface (Gitea) raise (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */
import type { GiteaErrorCode } from "./gitea/client.ts";

export const FORGE_ERROR_CODES = [
  "RunnerNameBusy",
  "RunnerNameTaken",
  "ScaleSetNotReady",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof FORGE_ERROR_CODES)[number] | GiteaErrorCode, true> {}
}
