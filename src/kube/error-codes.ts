/**
 * The closed list of error codes the Kubernetes runtime (clients, informers, controllers, leader election) raise (`ImpError.code`), as the
 * part's own vocabulary: a code not listed here does not compile (shared/errors.ts), and
 * src/shared/error-codes.test.ts checks that the list is exactly what the part's code raises.
 */
import type { KubeErrorCode } from "./api-errors.ts";

export const KUBE_ERROR_CODES = [
  "BadGateway",
  "BadRequest",
  "CacheSyncTimeout",
  "ClientError",
  "Conflict",
  "CrdNamesConflict",
  "CrdRejected",
  "Forbidden",
  "Gone",
  "HealthServerListenFailed",
  "InternalError",
  "Invalid",
  "InvalidLeaderElection",
  "InvalidRateLimit",
  "LeadershipLost",
  "MalformedObject",
  "MethodNotAllowed",
  "MissingNamespace",
  "NotFound",
  "ReconcileAbandoned",
  "ReconcileTimeout",
  "RunnableExited",
  "ServerError",
  "ServiceUnavailable",
  "Timeout",
  "TooManyRequests",
  "Unauthorized",
  "UnsupportedMediaType",
] as const;

declare module "../shared/errors.ts" {
  interface ImpErrorCodes extends Record<(typeof KUBE_ERROR_CODES)[number] | (typeof KubeErrorCode)[keyof typeof KubeErrorCode], true> {}
}
