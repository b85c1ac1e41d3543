/**
 * The scale-set client's closed list of error codes, and the mapping from the Actions service's
 * answers to them. The service answers errors as .NET exceptions (`{typeName, message}`); the Go
 * client (actions/scaleset errors.go) tells them apart by a substring of `typeName`, and so do we.
 * Nothing from a response goes into an error but its status, the exception's type and a bounded
 * message: never a header, never a token.
 */
import { ImpError, conflictError, retryableError, terminalError } from "../../../shared/index.ts";

export const ScaleSetErrorCode = {
  /** 5xx, 429, a refused or timed-out connection: the service or the path to it is down. */
  Unavailable: "ActionsServiceUnavailable",
  /** The admin token (or the registration token that mints it) was refused even after a fresh one. */
  Unauthorized: "ActionsServiceUnauthorized",
  /** The scale set does not exist (any more): deleted on GitHub. */
  ScaleSetNotFound: "ScaleSetNotFound",
  /** Another listener holds the scale set's one message session (or a crashed one's has not expired). */
  SessionConflict: "ScaleSetSessionConflict",
  /** The message session is gone (expired, or deleted server-side). */
  SessionNotFound: "ScaleSetSessionNotFound",
  /** The session's queue token expired: refresh the session. */
  QueueTokenExpired: "ScaleSetQueueTokenExpired",
  /** generatejitconfig: a runner of that name exists already. */
  RunnerExists: "ScaleSetRunnerExists",
  RunnerNotFound: "ScaleSetRunnerNotFound",
  /** The runner runs a job and cannot be removed now. */
  JobStillRunning: "ScaleSetJobStillRunning",
  UnexpectedResponse: "ActionsServiceUnexpectedResponse",
  RequestFailed: "ActionsServiceRequestFailed",
} as const;
export type ScaleSetErrorCode = (typeof ScaleSetErrorCode)[keyof typeof ScaleSetErrorCode];

/** Which kind of endpoint answered: `queue` (the queue and acquirejobs) speaks with the session's token, `session` and `admin` with the admin token. */
export type Endpoint = "admin" | "session" | "queue";

export interface ServiceAnswer {
  readonly status: number;
  readonly typeName: string;
  readonly message: string;
}

/** What was being done, for "Cannot <doing>: <what the service said>". */
export function scaleSetError(doing: string, answer: ServiceAnswer, endpoint: Endpoint, context: Readonly<Record<string, string | number>> = {}): ImpError {
  const said = `HTTP ${answer.status}${answer.typeName === "" ? "" : ` ${shortType(answer.typeName)}`}${answer.message === "" ? "" : `: ${answer.message}`}`;
  const options = { context: { ...context, status: answer.status, ...(answer.typeName === "" ? {} : { exception: shortType(answer.typeName) }) } };
  const t = answer.typeName;
  const s = answer.status;
  if (t.includes("RunnerScaleSetNotFoundException") || (s === 404 && endpoint === "admin" && /scale ?set/i.test(answer.message))) {
    return terminalError(ScaleSetErrorCode.ScaleSetNotFound, `Cannot ${doing}: the runner scale set does not exist on GitHub (deleted?) (${said})`, options);
  }
  if (t.includes("SessionConflictException") || (s === 409 && endpoint === "session")) {
    return conflictError(ScaleSetErrorCode.SessionConflict, `Cannot ${doing}: another listener holds the scale set's message session, or a crashed one's has not expired yet (${said})`, options);
  }
  if (t.includes("AgentExistsException")) return conflictError(ScaleSetErrorCode.RunnerExists, `Cannot ${doing}: a runner of that name exists already (${said})`, options);
  if (t.includes("AgentNotFoundException")) return terminalError(ScaleSetErrorCode.RunnerNotFound, `Cannot ${doing}: no such runner (${said})`, options);
  if (t.includes("JobStillRunningException")) return conflictError(ScaleSetErrorCode.JobStillRunning, `Cannot ${doing}: the runner is running a job (${said})`, options);
  if (s === 401 && endpoint === "queue") {
    return retryableError(ScaleSetErrorCode.QueueTokenExpired, `Cannot ${doing}: the message queue token expired (${said})`, options);
  }
  if (s === 404 && (endpoint === "queue" || endpoint === "session" || t.includes("SessionExpired"))) {
    return terminalError(ScaleSetErrorCode.SessionNotFound, `Cannot ${doing}: the message session is gone (${said})`, options);
  }
  if (s === 401 || s === 403) return terminalError(ScaleSetErrorCode.Unauthorized, `Cannot ${doing}: the Actions service refused the credentials (${said})`, options);
  if (s === 429 || (s >= 500 && s !== 501)) return retryableError(ScaleSetErrorCode.Unavailable, `Cannot ${doing}: the Actions service is unavailable (${said})`, options);
  return terminalError(ScaleSetErrorCode.RequestFailed, `Cannot ${doing}: ${said}`, options);
}

/** `GitHub.Actions.Runtime.WebApi.XException, GitHub.Actions.Runtime.WebApi` → `XException`. */
function shortType(typeName: string): string {
  return (typeName.split(",")[0] ?? "").split(".").at(-1)?.slice(0, 128) ?? "";
}

export function unavailable(doing: string, cause: unknown): ImpError {
  const reason = cause instanceof Error ? (cause.name === "TimeoutError" ? "timed out" : cause.message.slice(0, 200)) : String(cause).slice(0, 200);
  return retryableError(ScaleSetErrorCode.Unavailable, `Cannot ${doing}: the Actions service cannot be reached (${reason})`);
}

export function hasCode(err: unknown, code: ScaleSetErrorCode): boolean {
  return err instanceof ImpError && err.code === code;
}
