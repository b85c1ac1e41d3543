/**
 * A client of what Imp needs from Gitea (1.27): its REST API (`/api/v1`: registration tokens,
 * runners, jobs) and one call of its runner protocol (`Register`, Connect JSON, under
 * `/api/actions`), with which the operator registers each VM's runner just in time. Written on
 * `fetch` rather than taken from a library: Gitea's generated JS SDKs cover neither the Actions
 * runner endpoints of 1.27 nor the Connect protocol, and Imp needs six calls.
 *
 * Every request has a timeout; 5xx, 429 and unreachable answers are retried with backoff, then
 * surface as the retryable GiteaUnavailable. The access token, registration tokens and a runner's
 * token are CredentialText: they never print.
 */
import { CredentialText } from "../github/index.ts";
import { backoffDelay, retryableError, systemClock, terminalError, type BackoffPolicy, type Clock } from "../../shared/index.ts";

export const GiteaErrorCode = {
  /** 5xx, 429, refused or timed-out connections. */
  Unavailable: "GiteaUnavailable",
  /** The access token was refused (401) or lacks the scope's rights (403). */
  Unauthorized: "GiteaUnauthorized",
  NotFound: "GiteaNotFound",
  /** Register refused the registration token (rotated, or not active). */
  RegistrationRefused: "GiteaRegistrationRefused",
  UnexpectedResponse: "GiteaUnexpectedResponse",
  RequestFailed: "GiteaRequestFailed",
} as const;
export type GiteaErrorCode = (typeof GiteaErrorCode)[keyof typeof GiteaErrorCode];

export type GiteaScope = { readonly kind: "repo"; readonly owner: string; readonly repo: string } | { readonly kind: "org"; readonly org: string };

export interface GiteaRunner {
  readonly id: number;
  readonly name: string;
  readonly online: boolean;
  readonly busy: boolean;
  readonly ephemeral: boolean;
}

export interface GiteaJob {
  readonly id: number;
  readonly runId: number;
  /** run_attempt: 1, and one more for each re-run (Gitea 1.27 gives a re-run a new job id as well). */
  readonly runAttempt: number;
  readonly name: string;
  /** runs-on */
  readonly labels: readonly string[];
  /** Gitea's words: queued, waiting (blocked on needs/approval), in_progress, completed. */
  readonly status: string;
  readonly conclusion: string | undefined;
  readonly runnerName: string | undefined;
  readonly createdAt: number | undefined;
  readonly startedAt: number | undefined;
  readonly completedAt: number | undefined;
  /** `owner/name`, from the job's URL. */
  readonly repository: string;
}

export interface RegisteredRunner {
  readonly id: number;
  readonly uuid: string;
  readonly name: string;
  /** The runner's own credential: with its uuid, what the `.runner` file holds. */
  readonly token: CredentialText;
}

export interface GiteaClientOptions {
  /** Gitea's root URL. */
  readonly baseUrl: string;
  readonly token: CredentialText;
  readonly clock?: Clock;
  readonly requestTimeoutMs?: number;
  readonly retry?: BackoffPolicy;
}

export const DEFAULT_GITEA_RETRY: BackoffPolicy = { baseMs: 500, factor: 2, capMs: 8_000, jitter: 0.2, maxAttempts: 4 };
/** Gitea's page limit for runner and job lists. */
const PAGE_LIMIT = 50;
const MAX_PAGES = 20;
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

const prefixOf = (scope: GiteaScope): string => (scope.kind === "repo" ? `/repos/${encodeURIComponent(scope.owner)}/${encodeURIComponent(scope.repo)}` : `/orgs/${encodeURIComponent(scope.org)}`);
export const describeGiteaScope = (scope: GiteaScope): string => (scope.kind === "repo" ? `repo ${scope.owner}/${scope.repo}` : `org ${scope.org}`);

export class GiteaClient {
  readonly #o: GiteaClientOptions;
  readonly #clock: Clock;
  readonly #base: string;

  constructor(options: GiteaClientOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#base = options.baseUrl.replace(/\/+$/, "");
  }

  /** The scope's registration token: reusable until rotated, so it stays in the operator's memory only. */
  async registrationToken(scope: GiteaScope, signal?: AbortSignal): Promise<CredentialText> {
    const data = await this.#rest(`get a runner registration token for ${describeGiteaScope(scope)}`, "POST", `${prefixOf(scope)}/actions/runners/registration-token`, undefined, signal);
    const token = (data as { token?: unknown } | undefined)?.token;
    if (typeof token !== "string" || token === "" || token.length > 1024) throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot get a runner registration token for ${describeGiteaScope(scope)}: Gitea's answer has no token`);
    return new CredentialText(token, "Gitea registration token");
  }

  /**
   * Registers an ephemeral runner with the runner protocol's Register (Connect JSON): a new uuid and
   * token that only this VM's runner will hold. `labels` are label names.
   */
  async register(registrationToken: CredentialText, runner: { readonly name: string; readonly labels: readonly string[] }, signal?: AbortSignal): Promise<RegisteredRunner> {
    const doing = `register runner ${runner.name}`;
    const body = { name: runner.name, token: registrationToken.reveal(), version: "imp", labels: runner.labels, ephemeral: true };
    const { status, text } = await this.#fetchRetrying(doing, "POST", `${this.#base}/api/actions/runner.v1.RunnerService/Register`, body, signal, false);
    if (status !== 200) {
      // Gitea answers every runner-protocol error as 500 with the reason in the message (docs/forges.md).
      const message = messageOf(text);
      if (/registration token|token not found|invalidated/i.test(message)) throw terminalError(GiteaErrorCode.RegistrationRefused, `Cannot ${doing}: Gitea refused the registration token (${message})`);
      if (status >= 500 || status === 429) throw retryableError(GiteaErrorCode.Unavailable, `Cannot ${doing}: HTTP ${status}${message === "" ? "" : `: ${message}`}`);
      throw terminalError(GiteaErrorCode.RequestFailed, `Cannot ${doing}: HTTP ${status}${message === "" ? "" : `: ${message}`}`);
    }
    const r = (parseJson(text, doing) as { runner?: { id?: unknown; uuid?: unknown; token?: unknown; name?: unknown } }).runner;
    const id = Number(r?.id); // protojson writes int64 as a string
    if (r === undefined || !Number.isSafeInteger(id) || id <= 0 || typeof r.uuid !== "string" || !/^[0-9a-f-]{36}$/i.test(r.uuid) || typeof r.token !== "string" || r.token === "") {
      throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot ${doing}: Gitea's answer has no runner id, uuid and token`);
    }
    return { id, uuid: r.uuid, name: typeof r.name === "string" ? r.name : runner.name, token: new CredentialText(r.token, "Gitea runner token") };
  }

  /** Every runner of the scope (at most 1000). */
  async listRunners(scope: GiteaScope, signal?: AbortSignal): Promise<GiteaRunner[]> {
    const items = await this.#pages(`list runners of ${describeGiteaScope(scope)}`, `${prefixOf(scope)}/actions/runners`, "runners", {}, signal);
    return items.map((v) => {
      const o = v as { id?: unknown; name?: unknown; status?: unknown; busy?: unknown; ephemeral?: unknown };
      if (typeof o.id !== "number" || typeof o.name !== "string") throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot list runners of ${describeGiteaScope(scope)}: a runner without id or name`);
      return { id: o.id, name: o.name, online: o.status === "online", busy: o.busy === true, ephemeral: o.ephemeral === true };
    });
  }

  /** Deletes a runner; one already gone (404) counts as done. */
  async deleteRunner(scope: GiteaScope, id: number, signal?: AbortSignal): Promise<"deleted" | "gone"> {
    try {
      await this.#rest(`delete runner ${id} of ${describeGiteaScope(scope)}`, "DELETE", `${prefixOf(scope)}/actions/runners/${id}`, undefined, signal);
      return "deleted";
    } catch (err) {
      if ((err as { code?: string }).code === GiteaErrorCode.NotFound) return "gone";
      throw err;
    }
  }

  /** Jobs of the scope with a status (`queued`: waiting for a runner), oldest first, at most 1000. */
  async listJobs(scope: GiteaScope, status: string, signal?: AbortSignal): Promise<GiteaJob[]> {
    const items = await this.#pages(`list ${status} jobs of ${describeGiteaScope(scope)}`, `${prefixOf(scope)}/actions/jobs`, "jobs", { status, sort: "id", order: "asc" }, signal);
    return items.map((v) => parseJob(v, describeGiteaScope(scope)));
  }

  /** One job, or undefined when Gitea has none with this id in the repository. */
  async getJob(owner: string, repo: string, id: number, signal?: AbortSignal): Promise<GiteaJob | undefined> {
    try {
      return parseJob(await this.#rest(`read job ${id} of ${owner}/${repo}`, "GET", `/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/actions/jobs/${id}`, undefined, signal), `${owner}/${repo}`);
    } catch (err) {
      if ((err as { code?: string }).code === GiteaErrorCode.NotFound) return undefined;
      throw err;
    }
  }

  /** One workflow run, or undefined when Gitea has none with this id in the repository. */
  async getRun(owner: string, repo: string, id: number, signal?: AbortSignal): Promise<GiteaRun | undefined> {
    try {
      return parseRun(await this.#rest(`read run ${id} of ${owner}/${repo}`, "GET", `/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/actions/runs/${id}`, undefined, signal), `${owner}/${repo}`);
    } catch (err) {
      if ((err as { code?: string }).code === GiteaErrorCode.NotFound) return undefined;
      throw err;
    }
  }

  /**
   * Runs Gitea's `stop_zombie_tasks` cron now (site admins only): the job of a runner whose VM died
   * fails once its heartbeats are ZOMBIE_TASK_TIMEOUT old, instead of at the cron's next run.
   * Returns whether Gitea ran it (false without the right).
   */
  async stopZombieTasks(signal?: AbortSignal): Promise<boolean> {
    try {
      await this.#rest("run Gitea's stop_zombie_tasks cron", "POST", "/admin/cron/stop_zombie_tasks", undefined, signal);
      return true;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === GiteaErrorCode.Unauthorized || code === GiteaErrorCode.NotFound) return false;
      throw err;
    }
  }

  async #pages(doing: string, path: string, key: string, query: Record<string, string>, signal?: AbortSignal): Promise<unknown[]> {
    const items: unknown[] = [];
    for (let page = 1; page <= MAX_PAGES; page++) {
      const qs = new URLSearchParams({ ...query, page: String(page), limit: String(PAGE_LIMIT) });
      const data = (await this.#rest(doing, "GET", `${path}?${qs}`, undefined, signal)) as Record<string, unknown> | undefined;
      const list = data?.[key];
      if (!Array.isArray(list)) throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot ${doing}: Gitea's answer has no array "${key}"`);
      items.push(...list);
      const total = typeof data?.["total_count"] === "number" ? data["total_count"] : items.length;
      if (list.length < PAGE_LIMIT || items.length >= total) return items;
    }
    throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot ${doing}: more than ${MAX_PAGES * PAGE_LIMIT} items`);
  }

  async #rest(doing: string, method: string, path: string, body: unknown, signal?: AbortSignal): Promise<unknown> {
    const { status, text } = await this.#fetchRetrying(doing, method, `${this.#base}/api/v1${path}`, body, signal, true);
    if (status >= 200 && status < 300) return text === "" ? undefined : parseJson(text, doing);
    const message = messageOf(text);
    const said = `HTTP ${status}${message === "" ? "" : `: ${message}`}`;
    if (status === 401 || status === 403) throw terminalError(GiteaErrorCode.Unauthorized, `Cannot ${doing}: Gitea refused the access token (${said}); it needs write access to the scope`);
    if (status === 404) throw terminalError(GiteaErrorCode.NotFound, `Cannot ${doing}: not found (${said})`);
    throw terminalError(GiteaErrorCode.RequestFailed, `Cannot ${doing}: ${said}`);
  }

  /** One request with the policy's retries for 5xx, 429 and network failures; other answers are returned. */
  async #fetchRetrying(doing: string, method: string, url: string, body: unknown, signal: AbortSignal | undefined, authorized: boolean): Promise<{ status: number; text: string }> {
    const policy = this.#o.retry ?? DEFAULT_GITEA_RETRY;
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      try {
        const timeout = AbortSignal.timeout(this.#o.requestTimeoutMs ?? 30_000);
        const response = await fetch(url, {
          method,
          headers: { accept: "application/json", ...(body === undefined ? {} : { "content-type": "application/json" }), ...(authorized ? { authorization: `token ${this.#o.token.reveal()}` } : {}) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          signal: signal === undefined ? timeout : AbortSignal.any([signal, timeout]),
        });
        const text = await response.text();
        if (text.length > MAX_RESPONSE_BYTES) throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot ${doing}: Gitea's answer is larger than ${MAX_RESPONSE_BYTES} bytes`);
        // Gitea's runner protocol answers every failure 500 with a reason: only unreachable or overloaded is retried there.
        const transient = response.status === 429 || response.status === 502 || response.status === 503 || response.status === 504 || (authorized && response.status >= 500);
        if (!transient || attempt >= policy.maxAttempts) return { status: response.status, text };
      } catch (err) {
        signal?.throwIfAborted();
        if ((err as { code?: string }).code === GiteaErrorCode.UnexpectedResponse) throw err;
        const failure = err instanceof Error ? (err.name === "TimeoutError" ? "timed out" : err.message.slice(0, 200)) : String(err);
        if (attempt >= policy.maxAttempts) throw retryableError(GiteaErrorCode.Unavailable, `Cannot ${doing}: Gitea cannot be reached (${failure})`);
      }
      await this.#clock.sleep(backoffDelay(policy, attempt), signal);
    }
  }
}

function parseJson(text: string, doing: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot ${doing}: Gitea's answer is not JSON`);
  }
}

/** Gitea's error message (`{message}` on REST, `{code, message}` on Connect), bounded; nothing else of the body. */
function messageOf(text: string): string {
  try {
    const m = (JSON.parse(text) as { message?: unknown }).message;
    return typeof m === "string" ? m.slice(0, 300) : "";
  } catch {
    return "";
  }
}

function time(v: unknown): number | undefined {
  if (typeof v !== "string") return undefined;
  const ms = Date.parse(v);
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

/** A workflow run as the cache trust rule needs it. */
export interface GiteaRun {
  readonly id: number;
  readonly event: string;
  /** The branch of the run's ref; empty for a tag. */
  readonly headBranch: string;
  /** `owner/name` of the run's repository and its default branch. */
  readonly repository: string;
  readonly defaultBranch: string;
  /** `owner/name` of the repository its code came from, when Gitea says (1.27 leaves it out). */
  readonly headRepository: string | undefined;
}

function parseRun(value: unknown, where: string): GiteaRun {
  const o = (value ?? {}) as Record<string, unknown>;
  const repo = (o["repository"] ?? {}) as Record<string, unknown>;
  const head = o["head_repository"] as Record<string, unknown> | null | undefined;
  if (typeof o["id"] !== "number" || typeof o["event"] !== "string" || typeof repo["full_name"] !== "string" || typeof repo["default_branch"] !== "string") {
    throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot read a run of ${where}: no id, event, repository or default branch`);
  }
  return {
    id: o["id"],
    event: o["event"],
    headBranch: typeof o["head_branch"] === "string" ? o["head_branch"] : "",
    repository: repo["full_name"],
    defaultBranch: repo["default_branch"],
    headRepository: typeof head?.["full_name"] === "string" ? head["full_name"] : undefined,
  };
}

function parseJob(value: unknown, where: string): GiteaJob {
  const o = (value ?? {}) as Record<string, unknown>;
  if (typeof o["id"] !== "number" || typeof o["status"] !== "string") throw terminalError(GiteaErrorCode.UnexpectedResponse, `Cannot read a job of ${where}: no id or status`);
  const labels = Array.isArray(o["labels"]) ? (o["labels"] as unknown[]).filter((l): l is string => typeof l === "string").slice(0, 64) : [];
  // html_url is <root>/<owner>/<repo>/actions/runs/<run>/jobs/<job>: the repository of a job in an org-wide list.
  const repository = /\/([^/]+\/[^/]+)\/actions\/runs\//.exec(typeof o["html_url"] === "string" ? o["html_url"] : "")?.[1] ?? "";
  return {
    id: o["id"],
    runId: typeof o["run_id"] === "number" ? o["run_id"] : 0,
    runAttempt: typeof o["run_attempt"] === "number" && Number.isSafeInteger(o["run_attempt"]) && o["run_attempt"] >= 1 ? o["run_attempt"] : 1,
    name: typeof o["name"] === "string" ? o["name"].slice(0, 256) : "",
    labels,
    status: o["status"],
    conclusion: typeof o["conclusion"] === "string" && o["conclusion"] !== "" ? o["conclusion"] : undefined,
    runnerName: typeof o["runner_name"] === "string" && o["runner_name"] !== "" ? o["runner_name"] : undefined,
    createdAt: time(o["created_at"]),
    startedAt: time(o["started_at"]),
    completedAt: time(o["completed_at"]),
    repository,
  };
}
