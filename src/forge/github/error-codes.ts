/**
 * The closed list of error codes the GitHub adapter and its scale-set client raise (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */
import type { GitHubErrorCode } from "./errors.ts";
import type { ScaleSetErrorCode } from "./scaleset/errors.ts";

export const GITHUB_ERROR_CODES = [
  "RunnerGroupNotFound",
] as const;

declare module "../../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof GITHUB_ERROR_CODES)[number] | GitHubErrorCode | ScaleSetErrorCode, true> {}
}
