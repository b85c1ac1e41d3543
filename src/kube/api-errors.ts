import { ImpError, conflictError, retryableError, terminalError, type ErrorClass, type ImpErrorCode } from "../shared/index.ts";

/**
 * The one place that maps Kubernetes API failures to Imp's error classes. Every
 * adapter call goes through `classifyApiError`; queues and retry loops read only `errorClass` and
 * `code`. Codes are the apiserver's `Status.reason` vocabulary where one exists.
 */
export const API_STATUS_CLASSES = {
  400: ["terminal", "BadRequest"],
  401: ["retryable", "Unauthorized"], // credentials rotate; a retry with backoff can succeed
  403: ["retryable", "Forbidden"], // RBAC can be granted after the fact (and is, during installs)
  404: ["terminal", "NotFound"],
  405: ["terminal", "MethodNotAllowed"],
  409: ["conflict", "Conflict"], // or AlreadyExists, told apart by Status.reason
  410: ["retryable", "Gone"], // resourceVersion compacted: relist, then carry on
  415: ["terminal", "UnsupportedMediaType"],
  422: ["terminal", "Invalid"],
  429: ["retryable", "TooManyRequests"],
  500: ["retryable", "InternalError"],
  502: ["retryable", "BadGateway"],
  503: ["retryable", "ServiceUnavailable"],
  504: ["retryable", "Timeout"],
} as const satisfies Record<number, readonly [ErrorClass, string]>;

/** Codes the rest of Imp may branch on. */
export const KubeErrorCode = {
  NotFound: "NotFound",
  AlreadyExists: "AlreadyExists",
  Conflict: "Conflict",
  Gone: "Gone",
  Invalid: "Invalid",
  Network: "NetworkError",
  Timeout: "Timeout",
  Aborted: "Aborted",
} as const;

interface ApiFailureShape {
  readonly code?: unknown;
  readonly statusCode?: unknown;
  readonly body?: unknown;
}

/** Extracts the HTTP status from client-node's `ApiException` (`code`) or `Watch` errors (`statusCode`). */
export function httpStatusOf(err: unknown): number | undefined {
  // DOMException (our own deadline's AbortSignal) has a numeric legacy `code` (23) that is no HTTP status.
  if (typeof err !== "object" || err === null || err instanceof DOMException) return undefined;
  const shape = err as ApiFailureShape;
  const status = typeof shape.code === "number" ? shape.code : shape.statusCode;
  return typeof status === "number" && status >= 100 && status <= 599 ? status : undefined;
}

/** The apiserver's `Status` object carried by an error, if any (client-node parses it into `body`). */
function statusBodyOf(err: unknown): { reason?: string; message?: string } | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  let body = (err as ApiFailureShape).body;
  if (typeof body === "string") {
    const text = body;
    try {
      body = JSON.parse(text);
    } catch {
      return { message: text.slice(0, 500) };
    }
  }
  if (typeof body !== "object" || body === null) return undefined;
  const { reason, message } = body as { reason?: unknown; message?: unknown };
  return {
    ...(typeof reason === "string" ? { reason } : {}),
    ...(typeof message === "string" ? { message } : {}),
  };
}

/**
 * Turns anything thrown by a client-node call into an `ImpError` whose message reads
 * "Cannot <action> <object>: <state>". ImpErrors pass through unchanged; errors without an HTTP
 * status (refused connections, resets, our own deadlines) are retryable network failures.
 */
export function classifyApiError(err: unknown, what: { readonly action: string; readonly object: string }): ImpError {
  if (err instanceof ImpError) return err;
  const { action, object } = what;
  const status = httpStatusOf(err);
  const context = { object, ...(status === undefined ? {} : { status }) };
  if (status === undefined) {
    const name = err instanceof Error ? err.name : "";
    const [code, state] =
      name === "TimeoutError"
        ? [KubeErrorCode.Timeout, "request timed out"]
        : name === "AbortError"
          ? [KubeErrorCode.Aborted, "request aborted"]
          : [KubeErrorCode.Network, networkReason(err)];
    return retryableError(code, `Cannot ${action} ${object}: ${state}`, { cause: err, context });
  }
  const body = statusBodyOf(err);
  const known = (API_STATUS_CLASSES as Record<number, readonly [ErrorClass, ImpErrorCode] | undefined>)[status];
  const [errorClass, defaultCode]: readonly [ErrorClass, ImpErrorCode] = known ?? (status >= 500 ? ["retryable", "ServerError"] : ["terminal", "ClientError"]);
  const code = status === 409 && body?.reason === "AlreadyExists" ? KubeErrorCode.AlreadyExists : defaultCode;
  const detail = body?.message ?? `HTTP ${status}`;
  const message = `Cannot ${action} ${object}: ${detail}`;
  const make = errorClass === "conflict" ? conflictError : errorClass === "terminal" ? terminalError : retryableError;
  return make(code, message, { cause: err, context });
}

function networkReason(err: unknown): string {
  const cause = err instanceof Error ? (err.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  if (typeof cause?.code === "string") return `connection failed (${cause.code})`;
  return err instanceof Error ? err.message : String(err);
}

const hasCode = (err: unknown, code: string): boolean => err instanceof ImpError && err.code === code;
export const isNotFound = (err: unknown): boolean => hasCode(err, KubeErrorCode.NotFound);
export const isAlreadyExists = (err: unknown): boolean => hasCode(err, KubeErrorCode.AlreadyExists);
export const isConflict = (err: unknown): boolean => hasCode(err, KubeErrorCode.Conflict);
export const isGone = (err: unknown): boolean => hasCode(err, KubeErrorCode.Gone);
