import { ImpError, conflictError, retryableError, terminalError } from "../../shared/index.ts";

/**
 * The one place that maps GitHub API failures to Imp's error classes. The operator's queues read
 * only `errorClass` and `code`. Raw octokit errors are never passed on as `cause`: they carry the
 * request (headers included), so the cause we attach is rebuilt from status, method, path and
 * GitHub's own message, which are safe to log.
 */
export const GitHubErrorCode = {
  /** Bad App id, wrong private key, revoked installation, or an expired token GitHub refused twice. */
  Unauthorized: "GitHubUnauthorized",
  /** The App lacks a permission for this scope (see docs/github.md). */
  Forbidden: "GitHubForbidden",
  RateLimited: "GitHubRateLimited",
  /** 5xx, timeouts, refused connections: GitHub or the path to it is down. */
  Unavailable: "GitHubUnavailable",
  NotFound: "GitHubNotFound",
  /** The object exists already (e.g. a runner with that name). */
  Conflict: "GitHubConflict",
  Invalid: "GitHubInvalid",
  RequestFailed: "GitHubRequestFailed",
  /** GitHub answered 2xx with a body that does not have the documented shape. */
  UnexpectedResponse: "GitHubUnexpectedResponse",
} as const;

export type GitHubErrorCode = (typeof GitHubErrorCode)[keyof typeof GitHubErrorCode];

/** What was being done, for "Cannot <action> <object>: <state>" and for the error's context. */
export interface GitHubCall {
  readonly action: string;
  readonly object: string;
  readonly context?: Readonly<Record<string, string | number | boolean | undefined>>;
}

interface RequestErrorShape {
  readonly status?: unknown;
  readonly message?: unknown;
  readonly name?: unknown;
  readonly request?: { readonly method?: unknown; readonly url?: unknown };
  readonly response?: { readonly headers?: Record<string, unknown>; readonly data?: unknown };
}

/** The HTTP status of an octokit RequestError; undefined for network failures. */
export function httpStatusOf(err: unknown): number | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const status = (err as RequestErrorShape).status;
  return typeof status === "number" && status >= 100 && status <= 599 ? status : undefined;
}

function headerOf(err: RequestErrorShape, name: string): string | undefined {
  const value = err.response?.headers?.[name];
  return typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined;
}

/** GitHub's own error message from the response body (`{ message, documentation_url }`). */
export function gitHubMessageOf(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const data = (err as RequestErrorShape).response?.data;
  if (typeof data === "object" && data !== null && typeof (data as { message?: unknown }).message === "string") {
    return (data as { message: string }).message.slice(0, 300);
  }
  return undefined;
}

function documentationUrlOf(err: RequestErrorShape): string | undefined {
  const data = err.response?.data;
  if (typeof data !== "object" || data === null) return undefined;
  const url = (data as { documentation_url?: unknown }).documentation_url;
  return typeof url === "string" ? url.slice(0, 300) : undefined;
}

/** A path without its query string: queries may carry names, never secrets, but stay out of logs anyway. */
function pathOf(err: RequestErrorShape): string | undefined {
  const url = err.request?.url;
  if (typeof url !== "string") return undefined;
  try {
    return new URL(url, "http://github.invalid").pathname;
  } catch {
    return undefined;
  }
}

/** Whether a 403/429 is one of GitHub's rate limits rather than a missing permission. */
export function isRateLimitFailure(status: number, remaining: string | undefined, message: string | undefined): boolean {
  if (status === 429) return true;
  if (status !== 403) return false;
  return remaining === "0" || /rate limit/i.test(message ?? "");
}

/**
 * Turns anything an octokit call threw into an ImpError. ImpErrors pass through unchanged.
 */
export function classifyGitHubError(err: unknown, call: GitHubCall): ImpError {
  if (err instanceof ImpError) return err;
  const shape = (typeof err === "object" && err !== null ? err : {}) as RequestErrorShape;
  const status = httpStatusOf(err);
  const message = gitHubMessageOf(err);
  const method = typeof shape.request?.method === "string" ? shape.request.method : undefined;
  const path = pathOf(shape);
  const requestId = headerOf(shape, "x-github-request-id");
  const retryAfter = headerOf(shape, "retry-after");
  const reset = headerOf(shape, "x-ratelimit-reset");
  const remaining = headerOf(shape, "x-ratelimit-remaining");
  const context = {
    ...call.context,
    status,
    method,
    path,
    githubMessage: message,
    githubRequestId: requestId,
    documentationUrl: documentationUrlOf(shape),
    retryAfterSeconds: retryAfter === undefined ? undefined : Number(retryAfter),
    rateLimitReset: reset === undefined ? undefined : new Date(Number(reset) * 1000).toISOString(),
  };
  // Network failures arrive as status 500 from octokit with no response; say what really happened.
  const rawMessage = typeof shape.message === "string" ? shape.message.slice(0, 300) : String(err).slice(0, 300);
  const cause = new Error(
    status === undefined || shape.response === undefined
      ? `request failed without an HTTP response: ${rawMessage}`
      : `HTTP ${status}${method === undefined ? "" : ` ${method}`}${path === undefined ? "" : ` ${path}`}${message === undefined ? "" : `: ${message}`}`,
  );
  const options = { cause, context };
  const what = `Cannot ${call.action} ${call.object}`;

  if (status === undefined || shape.response === undefined) {
    return retryableError(GitHubErrorCode.Unavailable, `${what}: GitHub did not answer (${rawMessage})`, options);
  }
  if (isRateLimitFailure(status, remaining, message)) {
    const when = retryAfter !== undefined ? `retry after ${retryAfter} s` : reset !== undefined ? `limit resets at ${context.rateLimitReset}` : "slow down";
    return retryableError(GitHubErrorCode.RateLimited, `${what}: GitHub rate limit reached, ${when}`, options);
  }
  switch (status) {
    case 401:
      return terminalError(
        GitHubErrorCode.Unauthorized,
        `${what}: GitHub refused the credentials (check the App id, installation id and private key, or the token for enterprise scopes)`,
        options,
      );
    case 403:
      return terminalError(
        GitHubErrorCode.Forbidden,
        `${what}: the GitHub App lacks the permission for this (${message ?? "forbidden"}); see docs/github.md for the permissions per scope`,
        options,
      );
    case 404:
      return terminalError(GitHubErrorCode.NotFound, `${what}: not found on GitHub (or the App is not installed there)`, options);
    case 409:
      return conflictError(GitHubErrorCode.Conflict, `${what}: ${message ?? "already exists"}`, options);
    case 422:
      return terminalError(GitHubErrorCode.Invalid, `${what}: GitHub rejected the request (${message ?? "validation failed"})`, options);
  }
  if (status >= 500) {
    return retryableError(GitHubErrorCode.Unavailable, `${what}: GitHub answered ${status}`, options);
  }
  return terminalError(GitHubErrorCode.RequestFailed, `${what}: GitHub answered ${status}${message === undefined ? "" : ` (${message})`}`, options);
}
