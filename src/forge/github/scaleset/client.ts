/**
 * A client of GitHub's runner scale-set API (the Actions service), the protocol
 * `github.com/actions/scaleset` implements in Go for actions-runner-controller. There is no
 * JavaScript library for it, and the service is not in GitHub's REST description (so octokit's
 * typed routes do not cover it): this file speaks it with `fetch`, shape for shape as the Go
 * module does (docs/github.md, "Scale-set mode").
 *
 * The auth chain runs lazily and again a minute before the admin token's `exp`: installation
 * token (octokit) → runner registration token → `POST /actions/runner-registration` → the Actions
 * service URL and its admin token. The message queue and acquirejobs speak with the session's own
 * queue token. Every request has a timeout; 5xx, 429 and unreachable answers are retried with the
 * policy's backoff (Retry-After honoured), then surface as the retryable ActionsServiceUnavailable.
 * No credential reaches a log or an error.
 */
import { backoffDelay, retryableError, silentLogger, systemClock, terminalError, type BackoffPolicy, type Clock, type Logger } from "../../../shared/index.ts";
import { CredentialText } from "../credential-text.ts";
import type { GitHubScope } from "../scope.ts";
import { configUrlOf, runnerRegistrationUrlOf } from "./config-url.ts";
import { ScaleSetErrorCode, hasCode, scaleSetError, unavailable, type Endpoint, type ServiceAnswer } from "./errors.ts";
import {
  parseAcquired,
  parseJitConfig,
  parseList,
  parseMessage,
  parseRunnerReference,
  parseScaleSet,
  parseSession,
  type RunnerReference,
  type RunnerScaleSet,
  type ScaleSetJitConfig,
  type ScaleSetLabel,
  type ScaleSetMessage,
  type ScaleSetSession,
} from "./shapes.ts";

export interface ScaleSetClientOptions {
  /** Mints registration tokens (the GitHub REST client of the pool's credentials). */
  readonly registrationTokens: { createRegistrationToken(scope: GitHubScope): Promise<{ readonly token: CredentialText }> };
  readonly apiBaseUrl: string;
  readonly scope: GitHubScope;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /** Every request but the queue's long poll. */
  readonly requestTimeoutMs?: number;
  /** The queue's long poll: longer than the ~50 s the service holds it. */
  readonly longPollTimeoutMs?: number;
  /** 5xx, 429 and unreachable: go-retryablehttp's 5 attempts, 1 s doubling to 30 s, by default. */
  readonly retry?: BackoffPolicy;
  /** Told to the service in User-Agent (as the Go client's JSON system info). */
  readonly system?: string;
}

export const SCALE_SET_API_VERSION = "6.0-preview";
export const DEFAULT_SCALE_SET_RETRY: BackoffPolicy = { baseMs: 1_000, factor: 2, capMs: 30_000, jitter: 0.2, maxAttempts: 5 };
/** Refresh the admin token this long before its `exp`, as the Go client does. */
export const ADMIN_TOKEN_MARGIN_MS = 60_000;
/** An admin token without a readable `exp` is used this long (the Go client would crash on it). */
const ADMIN_TOKEN_FALLBACK_MS = 10 * 60_000;
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

interface AdminConnection {
  readonly serviceUrl: string;
  readonly token: CredentialText;
  readonly expiresAtMs: number;
}

interface RequestSpec {
  readonly doing: string;
  readonly method: "GET" | "POST" | "PATCH" | "DELETE";
  /** Relative to the service URL (admin and session endpoints), or absolute (the queue). */
  readonly path: string;
  readonly query?: Record<string, string>;
  readonly body?: unknown;
  readonly endpoint: Endpoint;
  /** The session's queue token instead of the admin token. */
  readonly sessionToken?: CredentialText;
  readonly expect: readonly number[];
  readonly timeoutMs?: number;
  /** Surface a 5xx at once instead of retrying it here (the caller has a backoff of its own). */
  readonly noRetry?: boolean;
  readonly headers?: Record<string, string>;
  readonly signal?: AbortSignal | undefined;
  readonly context?: Readonly<Record<string, string | number>>;
}

export type RemoveRunnerResult = "deleted" | "gone" | "busy";

export class ScaleSetClient {
  readonly #o: ScaleSetClientOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #retry: BackoffPolicy;
  #admin: AdminConnection | undefined;
  #connecting: Promise<AdminConnection> | undefined;

  constructor(options: ScaleSetClientOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? silentLogger;
    this.#retry = options.retry ?? DEFAULT_SCALE_SET_RETRY;
  }

  // ---- scale sets --------------------------------------------------------------------------

  /** The id of a runner group by name; `default` is always 1 (as ARC has it) and needs no request. */
  async runnerGroupId(name: string, signal?: AbortSignal): Promise<number> {
    if (name.toLowerCase() === "default") return 1;
    const data = await this.#request({ doing: `look up runner group ${name}`, method: "GET", path: "_apis/runtime/runnergroups/", query: { groupName: name }, endpoint: "admin", expect: [200], signal });
    const groups = parseList(data, "runner groups", (v) => parseRunnerReference(v));
    if (groups.length !== 1 || groups[0] === undefined) throw terminalError("RunnerGroupNotFound", `Cannot use runner group ${name}: GitHub has ${groups.length === 0 ? "no" : "more than one"} runner group of that name`);
    return groups[0].id;
  }

  /** The scale set of that name in the group, or undefined. */
  async findScaleSet(name: string, runnerGroupId: number, signal?: AbortSignal): Promise<RunnerScaleSet | undefined> {
    const data = await this.#request({ doing: `look up runner scale set ${name}`, method: "GET", path: "_apis/runtime/runnerscalesets", query: { runnerGroupId: String(runnerGroupId), name }, endpoint: "admin", expect: [200], signal, context: { scaleSet: name } });
    const found = parseList(data, "runner scale sets", (v) => parseScaleSet(v));
    if (found.length > 1) throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot look up runner scale set ${name}: GitHub lists ${found.length} of that name`);
    return found[0];
  }

  async createScaleSet(request: { readonly name: string; readonly runnerGroupId: number; readonly labels: readonly ScaleSetLabel[] }, signal?: AbortSignal): Promise<RunnerScaleSet> {
    // The body actions/scaleset sends (RunnerSetting with a capital R; createdOn is Go's zero time).
    const body = { name: request.name, runnerGroupId: request.runnerGroupId, labels: request.labels, RunnerSetting: { disableUpdate: true }, createdOn: "0001-01-01T00:00:00Z" };
    const data = await this.#request({ doing: `create runner scale set ${request.name}`, method: "POST", path: "_apis/runtime/runnerscalesets", body, endpoint: "admin", expect: [200], signal, context: { scaleSet: request.name } });
    return parseScaleSet(data);
  }

  async getScaleSet(id: number, signal?: AbortSignal): Promise<RunnerScaleSet> {
    return parseScaleSet(await this.#request({ doing: `read runner scale set ${id}`, method: "GET", path: `_apis/runtime/runnerscalesets/${id}`, endpoint: "admin", expect: [200], signal, context: { scaleSetId: id } }));
  }

  /** Deletes a scale set; one already gone counts as done. */
  async deleteScaleSet(id: number, signal?: AbortSignal): Promise<void> {
    try {
      await this.#request({ doing: `delete runner scale set ${id}`, method: "DELETE", path: `_apis/runtime/runnerscalesets/${id}`, endpoint: "admin", expect: [204, 200], signal, context: { scaleSetId: id } });
    } catch (err) {
      if (!hasCode(err, ScaleSetErrorCode.ScaleSetNotFound)) throw err;
    }
  }

  // ---- message sessions ----------------------------------------------------------------------

  /** Opens the scale set's one message session. ScaleSetSessionConflict while another holds it. */
  async createSession(scaleSetId: number, ownerName: string, signal?: AbortSignal): Promise<ScaleSetSession> {
    const body = { sessionId: "00000000-0000-0000-0000-000000000000", ownerName };
    const data = await this.#request({ doing: `open a message session on runner scale set ${scaleSetId}`, method: "POST", path: `_apis/runtime/runnerscalesets/${scaleSetId}/sessions`, body, endpoint: "session", expect: [200], signal, context: { scaleSetId } });
    return parseSession(data, scaleSetId);
  }

  /** A new queue token for the session (after the queue answered 401). ScaleSetSessionNotFound once it is gone. */
  async refreshSession(session: ScaleSetSession, signal?: AbortSignal): Promise<ScaleSetSession> {
    const data = await this.#request({ doing: `refresh message session ${session.id}`, method: "PATCH", path: `_apis/runtime/runnerscalesets/${session.scaleSetId}/sessions/${session.id}`, endpoint: "session", expect: [200], signal, context: { scaleSetId: session.scaleSetId } });
    return parseSession(data, session.scaleSetId);
  }

  /** Closes the session so the next listener need not wait for it to expire. One already gone counts as done. */
  async deleteSession(session: Pick<ScaleSetSession, "id" | "scaleSetId">, signal?: AbortSignal): Promise<void> {
    try {
      await this.#request({ doing: `close message session ${session.id}`, method: "DELETE", path: `_apis/runtime/runnerscalesets/${session.scaleSetId}/sessions/${session.id}`, endpoint: "session", expect: [204, 200], signal, context: { scaleSetId: session.scaleSetId } });
    } catch (err) {
      if (!hasCode(err, ScaleSetErrorCode.SessionNotFound) && !hasCode(err, ScaleSetErrorCode.ScaleSetNotFound)) throw err;
    }
  }

  /**
   * The long poll: the oldest message not yet deleted past `lastMessageId`, or undefined when the
   * service had none for its ~50 s. ScaleSetQueueTokenExpired on 401 (refresh and ask again). A 5xx
   * is not retried here: the listener backs off in its own table, and a poll it ends early (a new
   * capacity to say) must not end a retry that would have said the service is down.
   */
  async getMessage(session: ScaleSetSession, lastMessageId: number, maxCapacity: number, signal?: AbortSignal): Promise<ScaleSetMessage | undefined> {
    const url = new URL(session.queueUrl);
    if (lastMessageId > 0) url.searchParams.set("lastMessageId", String(lastMessageId));
    const data = await this.#request({
      doing: `poll the message queue of runner scale set ${session.scaleSetId}`,
      method: "GET",
      path: url.toString(),
      endpoint: "queue",
      sessionToken: session.queueToken,
      headers: { accept: `application/json; api-version=${SCALE_SET_API_VERSION}`, "x-scalesetmaxcapacity": String(Math.max(0, Math.floor(maxCapacity))) },
      expect: [200, 202],
      timeoutMs: this.#o.longPollTimeoutMs ?? 90_000,
      noRetry: true,
      signal,
      context: { scaleSetId: session.scaleSetId },
    });
    return data === undefined ? undefined : parseMessage(data);
  }

  /** The ack: the service redelivers every message not deleted. */
  async deleteMessage(session: ScaleSetSession, messageId: number, signal?: AbortSignal): Promise<void> {
    const url = new URL(session.queueUrl);
    url.pathname = `${url.pathname.replace(/\/+$/, "")}/${messageId}`;
    await this.#request({ doing: `acknowledge message ${messageId} of runner scale set ${session.scaleSetId}`, method: "DELETE", path: url.toString(), endpoint: "queue", sessionToken: session.queueToken, expect: [204, 200], signal, context: { scaleSetId: session.scaleSetId, messageId } });
  }

  /** Takes the jobs for this scale set; returns the runner request ids it got (another scale set may have won the rest). */
  async acquireJobs(session: ScaleSetSession, requestIds: readonly number[], signal?: AbortSignal): Promise<number[]> {
    const data = await this.#request({
      doing: `acquire ${requestIds.length} job(s) for runner scale set ${session.scaleSetId}`,
      method: "POST",
      path: `_apis/runtime/runnerscalesets/${session.scaleSetId}/acquirejobs`,
      body: requestIds,
      endpoint: "queue",
      sessionToken: session.queueToken,
      expect: [200],
      signal,
      context: { scaleSetId: session.scaleSetId },
    });
    return parseAcquired(data);
  }

  // ---- runners -----------------------------------------------------------------------------

  /** Registers runner `name` in the scale set; ScaleSetRunnerExists when the name is taken. */
  async generateJitConfig(scaleSetId: number, name: string, signal?: AbortSignal): Promise<ScaleSetJitConfig> {
    const data = await this.#request({ doing: `create a one-time runner setup for runner ${name} of scale set ${scaleSetId}`, method: "POST", path: `_apis/runtime/runnerscalesets/${scaleSetId}/generatejitconfig`, body: { name, workFolder: "" }, endpoint: "admin", expect: [200], signal, context: { scaleSetId, runnerName: name } });
    return parseJitConfig(data);
  }

  async findRunner(name: string, signal?: AbortSignal): Promise<RunnerReference | undefined> {
    const data = await this.#request({ doing: `look up runner ${name}`, method: "GET", path: "_apis/distributedtask/pools/0/agents", query: { agentName: name }, endpoint: "admin", expect: [200], signal, context: { runnerName: name } });
    return parseList(data, "runners", parseRunnerReference).find((r) => r.name === name);
  }

  async removeRunner(id: number, signal?: AbortSignal): Promise<RemoveRunnerResult> {
    try {
      await this.#request({ doing: `remove runner ${id}`, method: "DELETE", path: `_apis/distributedtask/pools/0/agents/${id}`, endpoint: "admin", expect: [204, 200], signal, context: { runnerId: id } });
      return "deleted";
    } catch (err) {
      if (hasCode(err, ScaleSetErrorCode.RunnerNotFound)) return "gone";
      if (hasCode(err, ScaleSetErrorCode.JobStillRunning)) return "busy";
      throw err;
    }
  }

  // ---- transport ---------------------------------------------------------------------------

  async #request(spec: RequestSpec): Promise<unknown> {
    for (let attempt = 1; ; attempt++) {
      spec.signal?.throwIfAborted();
      try {
        return await this.#once(spec);
      } catch (err) {
        const retryAfter = (err as { retryAfterMs?: number }).retryAfterMs;
        if (!hasCode(err, ScaleSetErrorCode.Unavailable) || spec.noRetry === true || attempt >= this.#retry.maxAttempts || spec.signal?.aborted === true) throw err;
        const delay = Math.min(this.#retry.capMs, retryAfter ?? backoffDelay(this.#retry, attempt));
        this.#logger.debug({ attempt, delayMs: delay, doing: spec.doing }, "the Actions service is unavailable; retrying");
        await this.#clock.sleep(delay, spec.signal);
      }
    }
  }

  async #once(spec: RequestSpec, adminRetried = false): Promise<unknown> {
    const admin = spec.endpoint === "queue" && spec.path.startsWith("http") ? undefined : await this.#connection(spec.signal);
    const url = spec.path.startsWith("http") ? new URL(spec.path) : new URL(spec.path, `${(admin as AdminConnection).serviceUrl.replace(/\/+$/, "")}/`);
    if (!spec.path.startsWith("http")) url.searchParams.set("api-version", SCALE_SET_API_VERSION);
    for (const [k, v] of Object.entries(spec.query ?? {})) url.searchParams.set(k, v);
    const token = spec.sessionToken ?? admin?.token;
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": JSON.stringify({ system: this.#o.system ?? "imp-operator", subsystem: "scale-set-listener", kind: "scaleset" }),
      ...(token === undefined ? {} : { authorization: `Bearer ${token.reveal()}` }),
      ...spec.headers,
    };
    const timeout = AbortSignal.timeout(spec.timeoutMs ?? this.#o.requestTimeoutMs ?? 30_000);
    let response: Response;
    try {
      response = await fetch(url, {
        method: spec.method,
        headers,
        ...(spec.body === undefined ? {} : { body: JSON.stringify(spec.body) }),
        signal: spec.signal === undefined ? timeout : AbortSignal.any([spec.signal, timeout]),
      });
    } catch (err) {
      spec.signal?.throwIfAborted();
      throw unavailable(spec.doing, err);
    }
    const text = await readText(response, spec.doing);
    if (spec.expect.includes(response.status)) {
      if (response.status === 202 && spec.endpoint === "queue") return undefined;
      if (text === "") return response.status === 200 && spec.method !== "DELETE" ? unexpectedEmpty(spec.doing) : undefined;
      try {
        return JSON.parse(text) as unknown;
      } catch {
        throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot ${spec.doing}: the Actions service answered ${response.status} with a body that is not JSON`);
      }
    }
    // An admin token refused before its time (revoked, or the service restarted): one fresh chain, then give up.
    if ((response.status === 401 || response.status === 403) && spec.sessionToken === undefined && !adminRetried) {
      this.#admin = undefined;
      return this.#once(spec, true);
    }
    const error = scaleSetError(spec.doing, answerOf(response.status, text), spec.endpoint, spec.context);
    const retryAfterSeconds = Number(response.headers.get("retry-after"));
    if (Number.isFinite(retryAfterSeconds) && retryAfterSeconds > 0) Object.assign(error, { retryAfterMs: retryAfterSeconds * 1000 });
    throw error;
  }

  async #connection(signal?: AbortSignal): Promise<AdminConnection> {
    const now = this.#clock.now();
    if (this.#admin !== undefined && now + ADMIN_TOKEN_MARGIN_MS < this.#admin.expiresAtMs) return this.#admin;
    this.#connecting ??= this.#connect(signal).finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  /** Installation token → registration token → runner-registration: the Actions service URL and its admin token. */
  async #connect(signal?: AbortSignal): Promise<AdminConnection> {
    const doing = "connect to the Actions service (runner-registration)";
    const url = runnerRegistrationUrlOf(this.#o.apiBaseUrl);
    const body = JSON.stringify({ url: configUrlOf(this.#o.apiBaseUrl, this.#o.scope), runner_event: "register" });
    // A fresh registration token may not be known to the service yet: 401/403 are retried here (as the Go client does).
    for (let attempt = 1; ; attempt++) {
      const { token } = await this.#o.registrationTokens.createRegistrationToken(this.#o.scope);
      let response: Response;
      try {
        response = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `RemoteAuth ${token.reveal()}` },
          body,
          signal: signal === undefined ? AbortSignal.timeout(this.#o.requestTimeoutMs ?? 30_000) : AbortSignal.any([signal, AbortSignal.timeout(this.#o.requestTimeoutMs ?? 30_000)]),
        });
      } catch (err) {
        signal?.throwIfAborted();
        if (attempt >= this.#retry.maxAttempts) throw unavailable(doing, err);
        await this.#clock.sleep(backoffDelay(this.#retry, attempt), signal);
        continue;
      }
      const text = await readText(response, doing);
      if (response.status >= 200 && response.status < 300) {
        const connection = parseConnection(text, doing, this.#clock.now());
        this.#admin = connection;
        return connection;
      }
      const retryable = response.status === 401 || response.status === 403 || response.status === 429 || (response.status >= 500 && response.status !== 501);
      if (!retryable || attempt >= this.#retry.maxAttempts) {
        const answer = answerOf(response.status, text);
        if (response.status === 401 || response.status === 403) throw terminalError(ScaleSetErrorCode.Unauthorized, `Cannot ${doing}: GitHub refused the registration token (HTTP ${response.status}${answer.message === "" ? "" : `: ${answer.message}`})`);
        throw scaleSetError(doing, answer, "admin");
      }
      await this.#clock.sleep(backoffDelay(this.#retry, attempt), signal);
    }
  }
}

async function readText(response: Response, doing: string): Promise<string> {
  const length = Number(response.headers.get("content-length"));
  if (Number.isFinite(length) && length > MAX_RESPONSE_BYTES) {
    await response.body?.cancel();
    throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot ${doing}: the Actions service's answer is larger than ${MAX_RESPONSE_BYTES} bytes`);
  }
  let text: string;
  try {
    text = await response.text();
  } catch (err) {
    throw unavailable(doing, err);
  }
  if (text.length > MAX_RESPONSE_BYTES) throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot ${doing}: the Actions service's answer is larger than ${MAX_RESPONSE_BYTES} bytes`);
  // The service sometimes starts its JSON with a byte-order mark.
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function unexpectedEmpty(doing: string): never {
  throw retryableError(ScaleSetErrorCode.UnexpectedResponse, `Cannot ${doing}: the Actions service answered 200 with an empty body`);
}

/** The .NET exception of an error answer: its type and a bounded message; nothing else of the body. */
function answerOf(status: number, text: string): ServiceAnswer {
  try {
    const o = JSON.parse(text) as { typeName?: unknown; message?: unknown };
    return { status, typeName: typeof o.typeName === "string" ? o.typeName.slice(0, 256) : "", message: typeof o.message === "string" ? o.message.slice(0, 300) : "" };
  } catch {
    return { status, typeName: "", message: "" };
  }
}

function parseConnection(text: string, doing: string, now: number): AdminConnection {
  let o: { url?: unknown; token?: unknown };
  try {
    o = JSON.parse(text) as typeof o;
  } catch {
    throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot ${doing}: GitHub's answer is not JSON`);
  }
  if (typeof o.url !== "string" || !/^https?:\/\//.test(o.url) || typeof o.token !== "string" || o.token === "") {
    throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot ${doing}: GitHub's answer has no Actions service url and token`);
  }
  return { serviceUrl: o.url, token: new CredentialText(o.token, "Actions service admin token"), expiresAtMs: jwtExpiry(o.token) ?? now + ADMIN_TOKEN_FALLBACK_MS };
}

/** The `exp` claim of a JWT, unverified (the service verifies its own token; we only need to know when to renew). */
export function jwtExpiry(token: string): number | undefined {
  const payload = token.split(".")[1];
  if (payload === undefined) return undefined;
  try {
    const exp = (JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { exp?: unknown }).exp;
    return typeof exp === "number" && Number.isFinite(exp) ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}
