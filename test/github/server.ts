import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { randomBytes, randomUUID, type KeyObject } from "node:crypto";
import type { AddressInfo } from "node:net";
import type { GitHubScope } from "../../src/forge/index.ts";
import { checkAppJwt } from "./app-jwt.ts";
import { encodeJitSetup } from "./jit-setup-format.ts";
import { OpenApiContract, type Operation, type Violation } from "./openapi-contract.ts";
import { sampleFromSchema } from "./schema-sample.ts";
import { WebhookSender } from "./webhook-sender.ts";
import { ACTIONS_SERVICE_PATH, ActionsService, QUEUE_PATH, type ActionsServiceOptions, type TestScaleSet } from "./actions-service.ts";

/**
 * A local stand-in for the parts of GitHub that Imp uses, held to GitHub's OpenAPI description
 * (openapi-contract.ts checks every request and response on a GitHub path). Besides GitHub's
 * paths it serves:
 *  - /_imp-test/runner/…: a minimal runner session API for guest/cmd/imp-test-runner (come online
 *    with the one-time secret from the jitconfig, take one job, renew its lock while it runs, report
 *    it). A setup works once: a second session for a runner, or any session after the first, is
 *    refused. A runner that goes silent is lost, as on GitHub: a job whose lock is not renewed
 *    within `jobLockTimeoutMs` fails, and a session that stops polling is closed (see #expireLost).
 *  - /_imp-test/control/…: test control over HTTP (the same operations as the methods below), for
 *    tests that drive the server from another process.
 *  - the runner scale-set API (`POST /actions/runner-registration`, then the Actions service under
 *    /_services/…), in actions-service.ts: jobs a scale set takes reach only its runners.
 * Faults (5xx, rate limits, delays, expired tokens, dropped or duplicated webhooks) are injected
 * with `injectFault` and friends; each fault is consumed by the requests it hits.
 */
export interface GitHubTestServerOptions {
  readonly appId: number;
  readonly installationId: number;
  readonly appPublicKey: KeyObject | string;
  /** Life of installation tokens; GitHub's is 3600. Tests set a few seconds to force refreshes. */
  tokenTtlSeconds?: number;
  /** Serve the API below this path, as GitHub Enterprise Server does under /api/v3. */
  readonly apiPrefix?: string;
  /**
   * Address to listen on; default 127.0.0.1. Runners inside VMs reach the server at this address
   * (the jitconfig's ServerUrl carries it), so an end-to-end test gives one its VMs can route to.
   */
  readonly host?: string;
  /**
   * How long a job in progress survives without its runner renewing the job's lock, and an open
   * session without its runner polling; then the runner counts as lost (its VM died): the job
   * completes as a failure and the runner goes offline, no longer busy. Real GitHub's job lock is
   * about 10 minutes; tests want the consequence within seconds. Default 15 s.
   */
  readonly jobLockTimeoutMs?: number;
  /** The scale-set service's timings (long poll, session expiry, token lives); GitHub's by default. */
  readonly actionsService?: Partial<ActionsServiceOptions>;
}

/**
 * GitHub's own timings: the queue's long poll holds ~50 s; a session no one polls goes stale after a
 * few minutes; a queue token lasts about an hour, the admin token a day; an acquired job no runner
 * takes is offered again after about a minute.
 */
export const GITHUB_ACTIONS_SERVICE_TIMINGS: ActionsServiceOptions = { queuePollMs: 50_000, sessionIdleMs: 180_000, queueTokenTtlMs: 3_600_000, adminTokenTtlSeconds: 86_400, reassignAfterMs: 60_000 };

export const DEFAULT_JOB_LOCK_TIMEOUT_MS = 15_000;

export type Fault = { readonly count: number; readonly path?: RegExp; readonly method?: string } & (
  | { readonly kind: "server-error"; readonly status?: 500 | 502 | 503 }
  | { readonly kind: "rate-limit"; readonly status?: 403 | 429; readonly resetInSeconds: number }
  | { readonly kind: "secondary-rate-limit"; readonly status?: 403 | 429; readonly retryAfterSeconds: number }
  | { readonly kind: "delay"; readonly ms: number }
);

export interface JobStep {
  readonly name: string;
  readonly run: string;
}

export interface TestJob {
  readonly id: number;
  readonly runId: number;
  readonly name: string;
  readonly repo: { readonly owner: string; readonly repo: string };
  readonly labels: readonly string[];
  readonly steps: readonly JobStep[];
  status: "queued" | "in_progress" | "completed";
  runnerId: number | undefined;
  runnerName: string | undefined;
  conclusion: "success" | "failure" | "cancelled" | undefined;
  result: { readonly conclusion: string; readonly steps: ReadonlyArray<{ readonly name: string; readonly exitCode: number }>; readonly log: string } | undefined;
  /** Date.now() when the job was queued, taken by a runner, and reported done. */
  readonly queuedAt: number;
  startedAt: number | undefined;
  completedAt: number | undefined;
  /** Date.now() of the last renewal of the job's lock by its runner (or of its start). */
  renewedAt: number | undefined;
  /** The scale set that acquired it, and when (scale-set jobs only). */
  scaleSetId?: number | undefined;
  acquiredAt?: number | undefined;
  reoffers?: number;
  /** Which attempt of its run this job is (GitHub's run_attempt): 1, or more for a re-run. */
  runAttempt?: number;
  /** What started its run: a push to main of the repository itself unless a test says otherwise. */
  readonly trigger?: JobTrigger;
}

export interface JobTrigger {
  readonly event: string;
  /** The run's branch; null for a tag. */
  readonly headBranch: string | null;
  /** `owner/name` the run's code came from, when not the repository itself (a fork's pull request). */
  readonly headRepository?: string;
}

const PUSH_TO_MAIN: JobTrigger = { event: "push", headBranch: "main" };

export interface TestRunner {
  readonly id: number;
  readonly name: string;
  readonly scopeKey: string;
  readonly runnerGroupId: number;
  readonly labels: ReadonlyArray<{ readonly id: number; readonly name: string; readonly type: "read-only" | "custom" }>;
  readonly workFolder: string;
  status: "online" | "offline";
  busy: boolean;
  version: string | null;
  readonly secret: string;
  setupUsed: boolean;
  session: string | undefined;
  jobId: number | undefined;
  /**
   * Until when the runner has shown it is alive: the time of its last request, or the end of the
   * long poll it is in. An open session idle for jobLockTimeoutMs past this is closed as lost.
   */
  seenUntil: number;
  /** Minted by a scale set's generatejitconfig: takes only jobs that scale set acquired. */
  readonly scaleSetId?: number;
}

export interface LoggedRequest {
  readonly method: string;
  readonly path: string;
  readonly status: number;
  readonly operationId: string | undefined;
  readonly faulted: boolean;
  /** Date.now() when the request arrived. */
  readonly at: number;
  /** The `name` of a request body that has one (jitconfig), to tell concurrent requests apart. */
  readonly name?: string;
}

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

const DOCS = "https://docs.github.com/rest";
const MAX_BODY = 1024 * 1024;
const MAX_JOB_LOG = 256 * 1024;
const READ_ONLY_LABELS = ["self-hosted", "Linux", "X64"];

export function scopeKeyOf(scope: GitHubScope): string {
  return scope.kind === "repo" ? `repo:${scope.owner}/${scope.repo}` : scope.kind === "org" ? `org:${scope.org}` : `enterprise:${scope.enterprise}`;
}

function scopeKeyFromParams(params: Record<string, string>): string {
  if (params["enterprise"] !== undefined) return `enterprise:${params["enterprise"]}`;
  if (params["org"] !== undefined) return `org:${params["org"]}`;
  return `repo:${params["owner"]}/${params["repo"]}`;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class GitHubTestServer {
  readonly contract = OpenApiContract.load();
  readonly violations: Violation[] = [];
  readonly requests: LoggedRequest[] = [];
  readonly webhooks = new WebhookSender();
  readonly runners = new Map<number, TestRunner>();
  readonly jobs = new Map<number, TestJob>();
  readonly tokens = new Map<string, { expiresAtMs: number; kind: "installation" | "personal" }>();
  /** Runner registration tokens (the scale-set auth chain's second link), by token. */
  readonly registrationTokens = new Map<string, { expiresAtMs: number; scopeKey: string }>();
  readonly actions: ActionsService;
  readonly #options: GitHubTestServerOptions;
  readonly #groups = new Map<string, Array<{ id: number; name: string; default: boolean }>>();
  #faults: Array<Fault & { remaining: number }> = [];
  readonly #barriers = new Map<string, Map<string, string>>();
  #tamper: ((reply: Reply) => Reply) | undefined;
  #server: Server | undefined;
  #lostTimer: NodeJS.Timeout | undefined;
  #nextId = 100;
  #url = "";

  constructor(options: GitHubTestServerOptions) {
    this.#options = options;
    const jobs = this.jobs;
    const runners = this.runners;
    const registrationTokens = this.registrationTokens;
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the service reads the server's state through this narrow view
    const server = this;
    this.actions = new ActionsService(
      {
        get url() {
          return server.url;
        },
        jobs: () => jobs.values(),
        runnersOf: (scaleSetId) => [...runners.values()].filter((r) => r.scaleSetId === scaleSetId),
        registerScaleSetRunner: (scaleSet, name, workFolder) => server.#registerScaleSetRunner(scaleSet, name, workFolder),
        findRunner: (id) => runners.get(id),
        removeRunner: (id) => void runners.delete(id),
        scopeKeyOfRegistration: (token) => {
          const t = registrationTokens.get(token);
          return t === undefined || t.expiresAtMs <= Date.now() ? undefined : t.scopeKey;
        },
      },
      { ...GITHUB_ACTIONS_SERVICE_TIMINGS, ...options.actionsService },
    );
  }

  get url(): string {
    return this.#url;
  }

  set tokenTtlSeconds(seconds: number) {
    this.#options.tokenTtlSeconds = seconds;
  }

  async start(): Promise<this> {
    const server = createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        process.stderr.write(`github test server: ${String(err)}\n`);
        if (!res.headersSent) res.writeHead(500).end();
        else res.destroy();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, this.#options.host ?? "127.0.0.1", () => resolve());
    });
    this.#server = server;
    this.#url = `http://${this.#options.host ?? "127.0.0.1"}:${(server.address() as AddressInfo).port}`;
    // Lost runners are noticed by a timer, as GitHub notices them, not only when someone asks.
    const every = Math.min(1000, Math.max(50, Math.floor(this.jobLockTimeoutMs / 10)));
    let last = Date.now();
    this.#lostTimer = setInterval(() => {
      const now = Date.now();
      // A tick far later than asked means this process's event loop stalled (a loaded machine):
      // renewals that arrived meanwhile are still unread, so judging locks now would blame runners
      // for the server's own stall. Read them first; judge at the next tick.
      const stalled = now - last > 3 * every;
      last = now;
      if (!stalled) this.#expireLost(now);
      this.actions.tick(now);
    }, every);
    this.#lostTimer.unref();
    return this;
  }

  get jobLockTimeoutMs(): number {
    return this.#options.jobLockTimeoutMs ?? DEFAULT_JOB_LOCK_TIMEOUT_MS;
  }

  async stop(): Promise<void> {
    clearInterval(this.#lostTimer);
    this.#lostTimer = undefined;
    await this.webhooks.settled();
    const server = this.#server;
    if (server === undefined) return;
    this.#server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  // ---- test control -------------------------------------------------------------------------

  injectFault(fault: Fault): void {
    this.#faults.push({ ...fault, remaining: fault.count });
  }

  /** Faults injected and not yet consumed by a request. */
  get faultsLeft(): number {
    return this.#faults.reduce((n, f) => n + f.remaining, 0);
  }

  /** Every token issued so far is refused from now on, as GitHub does once a token expired. */
  expireTokens(): void {
    for (const token of this.tokens.values()) token.expiresAtMs = 0;
  }

  /** Applies `fn` to the next GitHub response before it is validated: proves the validator catches a wrong one. */
  tamperWithNextResponse(fn: (reply: Reply) => Reply): void {
    this.#tamper = fn;
  }

  addRunnerGroup(scope: Extract<GitHubScope, { kind: "org" | "enterprise" }>, name: string): number {
    const id = this.#nextId++;
    this.#groupsOf(scopeKeyOf(scope)).push({ id, name, default: false });
    return id;
  }

  queueJob(job: { repo: { owner: string; repo: string }; labels: readonly string[]; steps: readonly JobStep[]; name?: string; trigger?: JobTrigger }): TestJob {
    const id = this.#nextId++;
    return this.#enqueue({ id, runId: id + 10_000, name: job.name ?? `job-${id}`, repo: job.repo, labels: job.labels, steps: job.steps, runAttempt: 1, ...(job.trigger === undefined ? {} : { trigger: job.trigger }) });
  }

  /**
   * Re-runs a finished job as a user does on GitHub ("Re-run job"): a new job, with an id of its own,
   * in the same workflow run as its next attempt (run_attempt + 1), queued and announced like any
   * other (webhook `queued`, JobAvailable to the scale sets that take it).
   */
  rerunJob(id: number): TestJob {
    const old = this.jobs.get(id);
    if (old === undefined) throw new Error(`no job ${id}`);
    if (old.status !== "completed") throw new Error(`job ${id} is ${old.status}: GitHub re-runs only finished jobs`);
    const attempt = Math.max(...[...this.jobs.values()].filter((j) => j.runId === old.runId).map((j) => j.runAttempt ?? 1)) + 1;
    return this.#enqueue({ id: this.#nextId++, runId: old.runId, name: old.name, repo: old.repo, labels: old.labels, steps: old.steps, runAttempt: attempt, ...(old.trigger === undefined ? {} : { trigger: old.trigger }) });
  }

  /** A new queued job, announced by its `queued` webhook and to the scale sets that take it. */
  #enqueue(job: Pick<TestJob, "id" | "runId" | "name" | "repo" | "labels" | "steps" | "runAttempt" | "trigger">): TestJob {
    const record: TestJob = {
      ...job,
      labels: [...job.labels],
      steps: [...job.steps],
      status: "queued",
      runnerId: undefined,
      runnerName: undefined,
      conclusion: undefined,
      result: undefined,
      queuedAt: Date.now(),
      startedAt: undefined,
      completedAt: undefined,
      renewedAt: undefined,
    };
    this.jobs.set(record.id, record);
    this.#jobWebhook(record, "queued");
    this.actions.jobQueued(record);
    return record;
  }

  /**
   * Cancels a job as a user does on GitHub. A queued job completes with conclusion `cancelled` and
   * no runner (runner_id and runner_name null in the webhook, as GitHub sends it); a job in
   * progress completes `cancelled` on its runner, which learns it at its next lock renewal and
   * stops. A completed job is left as it is (GitHub answers 409 there too); returns whether it was cancelled.
   */
  cancelJob(id: number): boolean {
    const job = this.jobs.get(id);
    if (job === undefined) throw new Error(`no job ${id}`);
    if (job.status === "completed") return false;
    const runner = job.runnerId === undefined ? undefined : this.runners.get(job.runnerId);
    job.status = "completed";
    job.completedAt = Date.now();
    job.conclusion = "cancelled";
    job.result = { conclusion: "cancelled", steps: [], log: "##[error]The operation was canceled.\n" };
    if (runner !== undefined && runner.jobId === id) runner.busy = false;
    this.#jobWebhook(job, "completed");
    this.actions.jobCompleted(job);
    return true;
  }

  /** Sets a runner's state as if its runner process had come online or picked up a job. */
  setRunnerState(runnerId: number, state: { status?: "online" | "offline"; busy?: boolean }): void {
    const runner = this.runners.get(runnerId);
    if (runner === undefined) throw new Error(`no runner ${runnerId}`);
    if (state.status !== undefined) runner.status = state.status;
    if (state.busy !== undefined) runner.busy = state.busy;
  }

  runnerNamed(name: string): TestRunner | undefined {
    return [...this.runners.values()].find((r) => r.name === name);
  }

  /** Requests whose path matches, in arrival order. */
  requestsTo(path: RegExp, method?: string): LoggedRequest[] {
    return this.requests.filter((r) => path.test(r.path) && (method === undefined || r.method === method));
  }

  // ---- HTTP ---------------------------------------------------------------------------------

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const prefix = this.#options.apiPrefix ?? "";
    if (prefix !== "" && !url.pathname.startsWith("/_imp-test/") && !url.pathname.startsWith("/_services/")) {
      if (!url.pathname.startsWith(`${prefix}/`)) return send(res, { status: 404, body: { message: "Not Found", documentation_url: DOCS } });
      url.pathname = url.pathname.slice(prefix.length);
    }
    const method = (req.method ?? "GET").toUpperCase();
    const at = Date.now();
    const raw = await readBody(req);
    if (raw === "too-large") return send(res, { status: 413, body: { message: "Payload too large" } });
    let body: unknown;
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        return send(res, { status: 400, body: { message: "Problems parsing JSON", documentation_url: DOCS } });
      }
    }
    if (url.pathname.startsWith("/_imp-test/")) {
      // A runner that hangs up in a long poll is gone; the poll must not hand it a job.
      const hungUp = new AbortController();
      res.once("close", () => hungUp.abort());
      const reply = await this.#handleTestPath(method, url, body, hungUp.signal);
      this.requests.push({ method, path: url.pathname, status: reply.status, operationId: undefined, faulted: false, at });
      return send(res, reply);
    }
    if (url.pathname === "/actions/runner-registration" || url.pathname.startsWith(`${ACTIONS_SERVICE_PATH}/`) || url.pathname.startsWith(`${QUEUE_PATH}/`)) {
      // Not in GitHub's REST description: the Actions service, held to what actions/scaleset sends and parses.
      const hungUp = new AbortController();
      res.once("close", () => hungUp.abort());
      const fault = url.pathname === "/actions/runner-registration" ? undefined : this.#takeFault(method, url.pathname);
      if (fault?.kind === "delay") {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, fault.ms);
          res.once("close", () => {
            clearTimeout(timer);
            resolve();
          });
        });
        if (res.destroyed) return;
      }
      const reply =
        fault !== undefined && fault.kind !== "delay"
          ? this.#faultReply(fault)
          : url.pathname === "/actions/runner-registration"
            ? method === "POST"
              ? this.actions.runnerRegistration(req.headers.authorization, body)
              : { status: 405 }
            : await this.actions.handle(method, url.pathname, url.searchParams, req.headers, body, hungUp.signal);
      this.requests.push({ method, path: url.pathname, status: reply.status, operationId: undefined, faulted: fault !== undefined, at });
      return send(res, reply);
    }
    const matched = this.contract.match(method, url.pathname);
    if (matched === undefined) {
      this.#violation({ direction: "request", method, path: url.pathname, operationId: undefined, problem: "no operation of the contract matches this request" });
      return send(res, { status: 404, body: { message: "Not Found", documentation_url: DOCS } });
    }
    const { operation, pathParams } = matched;
    let reply: Reply;
    let faulted = false;
    const problems = this.contract.checkRequest(operation, pathParams, url.searchParams, req.headers["content-type"], body);
    if (problems.length > 0) {
      for (const problem of problems) this.#violation({ direction: "request", method, path: url.pathname, operationId: operation.operationId, problem });
      reply = { status: 422, body: { message: "Validation Failed", documentation_url: DOCS, errors: problems } };
    } else {
      const fault = this.#takeFault(method, url.pathname);
      if (fault !== undefined) {
        faulted = true;
        if (fault.kind === "delay") {
          // A response slower than the client's timeout: the client gives up; we answer anyway, late.
          // Ends early when the client hangs up, so a long delay does not keep the process alive.
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, fault.ms);
            res.once("close", () => {
              clearTimeout(timer);
              resolve();
            });
          });
          if (res.destroyed) {
            this.requests.push({ method, path: url.pathname, status: 0, operationId: operation.operationId, faulted, at });
            return;
          }
          reply = this.#route(operation, pathParams, url.searchParams, body, req.headers.authorization);
        } else {
          reply = this.#faultReply(fault);
        }
      } else {
        reply = this.#route(operation, pathParams, url.searchParams, body, req.headers.authorization);
      }
    }
    if (this.#tamper !== undefined) {
      reply = this.#tamper(reply);
      this.#tamper = undefined;
    }
    for (const problem of this.contract.checkResponse(operation, reply.status, reply.body)) {
      this.#violation({ direction: "response", method, path: url.pathname, operationId: operation.operationId, problem });
    }
    const name = typeof (body as { name?: unknown } | undefined)?.name === "string" ? { name: (body as { name: string }).name } : {};
    this.requests.push({ method, path: url.pathname, status: reply.status, operationId: operation.operationId, faulted, at, ...name });
    send(res, { ...reply, headers: { ...this.#standardHeaders(), ...reply.headers } });
  }

  #violation(v: Violation): void {
    this.violations.push(v);
    process.stderr.write(`github test server: OpenAPI violation in ${v.direction} ${v.method} ${v.path} (${v.operationId ?? "no operation"}): ${v.problem}\n`);
  }

  #standardHeaders(): Record<string, string> {
    return {
      "x-github-request-id": randomBytes(8).toString("hex").toUpperCase(),
      "x-github-api-version-selected": "2022-11-28",
      "x-ratelimit-limit": "5000",
      "x-ratelimit-remaining": "4999",
      "x-ratelimit-reset": String(Math.floor(Date.now() / 1000) + 3600),
      "x-ratelimit-resource": "core",
    };
  }

  #takeFault(method: string, path: string): (Fault & { remaining: number }) | undefined {
    const fault = this.#faults.find((f) => f.remaining > 0 && (f.path === undefined || f.path.test(path)) && (f.method === undefined || f.method === method));
    if (fault === undefined) return undefined;
    fault.remaining--;
    this.#faults = this.#faults.filter((f) => f.remaining > 0);
    return fault;
  }

  #faultReply(fault: Exclude<Fault, { kind: "delay" }>): Reply {
    switch (fault.kind) {
      case "server-error":
        return { status: fault.status ?? 502, body: { message: "Server Error" } };
      case "rate-limit": {
        const reset = Math.floor(Date.now() / 1000) + fault.resetInSeconds;
        return {
          status: fault.status ?? 403,
          headers: { "x-ratelimit-remaining": "0", "x-ratelimit-used": "5000", "x-ratelimit-reset": String(reset) },
          body: { message: "API rate limit exceeded for installation ID 1.", documentation_url: `${DOCS}/overview/rate-limits-for-the-rest-api` },
        };
      }
      case "secondary-rate-limit":
        return {
          status: fault.status ?? 403,
          headers: { "retry-after": String(fault.retryAfterSeconds) },
          body: {
            message: "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
            documentation_url: `${DOCS}/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits`,
          },
        };
    }
  }

  #route(operation: Operation, params: Record<string, string>, query: URLSearchParams, body: unknown, authorization: string | undefined): Reply {
    if (operation.operationId === "apps/create-installation-access-token") return this.#accessToken(params, authorization);
    const denied = this.#checkToken(authorization, operation);
    if (denied !== undefined) return denied;
    const scopeKey = scopeKeyFromParams(params);
    const tail = operation.template.slice(operation.template.indexOf("/actions/"));
    switch (`${operation.method} ${tail}`) {
      case "POST /actions/runners/generate-jitconfig":
        return this.#generateJitConfig(scopeKey, body as { name: string; runner_group_id: number; labels: string[]; work_folder?: string });
      case "GET /actions/runners":
        return this.#listRunners(scopeKey, query);
      case "POST /actions/runners/registration-token": {
        const token = randomBytes(20).toString("base64url").toUpperCase().slice(0, 29);
        const expiresAtMs = Date.now() + 3_600_000;
        this.registrationTokens.set(token, { expiresAtMs, scopeKey });
        return { status: 201, body: { token, expires_at: isoSeconds(expiresAtMs) } };
      }
      case "GET /actions/runners/{runner_id}": {
        const runner = this.#runnerIn(scopeKey, Number(params["runner_id"]));
        return runner === undefined ? notFound() : { status: 200, body: runnerJson(runner) };
      }
      case "DELETE /actions/runners/{runner_id}": {
        const runner = this.#runnerIn(scopeKey, Number(params["runner_id"]));
        if (runner === undefined) return notFound();
        if (runner.busy) {
          return { status: 422, body: { message: `Bad request - Runner "${runner.name}" is still running a job"`, documentation_url: `${DOCS}/actions/self-hosted-runners` } };
        }
        this.runners.delete(runner.id);
        return { status: 204 };
      }
      case "GET /actions/runs":
        return this.#listQueuedRuns(operation, params, query);
      case "GET /actions/runs/{run_id}":
        return this.#runJson(operation, params);
      case "GET /actions/runs/{run_id}/jobs":
        return this.#listRunJobs(operation, params, query);
      case "GET /actions/jobs/{job_id}": {
        const job = this.jobs.get(Number(params["job_id"]));
        if (job === undefined || job.repo.owner !== params["owner"] || job.repo.repo !== params["repo"]) return notFound();
        return { status: 200, body: this.#jobJson(operation, job) };
      }
      case "GET /actions/runner-groups": {
        const groups = this.#groupsOf(scopeKey);
        const { page, perPage } = paging(query);
        const items = groups.slice((page - 1) * perPage, page * perPage);
        return {
          status: 200,
          body: { total_count: groups.length, runner_groups: items.map((g) => ({ id: g.id, name: g.name, visibility: "all", default: g.default, runners_url: `${this.#url}/runner-groups/${g.id}/runners`, inherited: false, allows_public_repositories: false })) },
        };
      }
    }
    return { status: 404, body: { message: "Not Found", documentation_url: DOCS } };
  }

  #accessToken(params: Record<string, string>, authorization: string | undefined): Reply {
    const jwt = /^bearer (.+)$/i.exec(authorization ?? "")?.[1];
    if (jwt === undefined) return { status: 401, body: { message: "A JSON web token could not be decoded", documentation_url: DOCS } };
    const problem = checkAppJwt(jwt, this.#options.appId, this.#options.appPublicKey, Math.floor(Date.now() / 1000));
    if (problem !== undefined) return { status: 401, body: { message: problem, documentation_url: DOCS } };
    if (Number(params["installation_id"]) !== this.#options.installationId) return notFound();
    const token = `ghs_${randomBytes(27).toString("base64url").slice(0, 36)}`;
    const expiresAtMs = Date.now() + (this.#options.tokenTtlSeconds ?? 3600) * 1000;
    this.tokens.set(token, { expiresAtMs, kind: "installation" });
    return {
      status: 201,
      body: {
        token,
        expires_at: new Date(expiresAtMs).toISOString().replace(/\.\d{3}Z$/, "Z"),
        permissions: { administration: "write", organization_self_hosted_runners: "write", metadata: "read" },
        repository_selection: "all",
      },
    };
  }

  #checkToken(authorization: string | undefined, operation: Operation): Reply | undefined {
    const token = /^(?:token|bearer) (.+)$/i.exec(authorization ?? "")?.[1];
    const record = token === undefined ? undefined : this.tokens.get(token);
    if (record === undefined || record.expiresAtMs <= Date.now()) {
      return { status: 401, body: { message: "Bad credentials", documentation_url: DOCS } };
    }
    // As on GitHub: operations the description marks enabledForGitHubApps: false refuse App tokens.
    if (record.kind === "installation" && !operation.enabledForGitHubApps) {
      return { status: 403, body: { message: "Resource not accessible by integration", documentation_url: DOCS } };
    }
    return undefined;
  }

  /** Accepts `token` as a personal access token (classic) with every scope, until the server stops. */
  acceptPersonalToken(token: string): void {
    this.tokens.set(token, { expiresAtMs: Number.POSITIVE_INFINITY, kind: "personal" });
  }

  #groupsOf(scopeKey: string): Array<{ id: number; name: string; default: boolean }> {
    let groups = this.#groups.get(scopeKey);
    if (groups === undefined) this.#groups.set(scopeKey, (groups = [{ id: 1, name: "Default", default: true }]));
    return groups;
  }

  #runnerIn(scopeKey: string, id: number): TestRunner | undefined {
    const runner = this.runners.get(id);
    return runner?.scopeKey === scopeKey ? runner : undefined;
  }

  #generateJitConfig(scopeKey: string, body: { name: string; runner_group_id: number; labels: string[]; work_folder?: string }): Reply {
    if ([...this.runners.values()].some((r) => r.scopeKey === scopeKey && r.name === body.name)) {
      return { status: 409, body: { message: `Already exists - A runner with the name ${body.name} already exists.`, documentation_url: DOCS } };
    }
    if (!scopeKey.startsWith("repo:") && !this.#groupsOf(scopeKey).some((g) => g.id === body.runner_group_id)) return notFound();
    const { runner, encoded } = this.registerRunner(scopeKey, body);
    return { status: 201, body: { runner: runnerJson(runner), encoded_jit_config: encoded } };
  }

  /** Registers a just-in-time runner as generate-jitconfig does (tests use it to fill long lists quickly). */
  registerRunner(scopeKey: string, body: { name: string; runner_group_id: number; labels: readonly string[]; work_folder?: string }): { runner: TestRunner; encoded: string } {
    const id = this.#nextId++;
    const runner: TestRunner = {
      id,
      name: body.name,
      scopeKey,
      runnerGroupId: body.runner_group_id,
      labels: [
        ...READ_ONLY_LABELS.map((name, i) => ({ id: i + 1, name, type: "read-only" as const })),
        ...body.labels.map((name, i) => ({ id: 100 + i, name, type: "custom" as const })),
      ],
      workFolder: body.work_folder ?? "_work",
      status: "offline",
      busy: false,
      version: null,
      secret: randomBytes(24).toString("base64url"),
      setupUsed: false,
      session: undefined,
      jobId: undefined,
      seenUntil: 0,
    };
    this.runners.set(id, runner);
    const encoded = encodeJitSetup(
      {
        AgentId: id,
        AgentName: runner.name,
        PoolId: runner.runnerGroupId,
        PoolName: "Default",
        ServerUrl: `${this.#url}/_imp-test/runner`,
        GitHubUrl: `${this.#url}/${scopeKey.replace(/^\w+:/, "")}`,
        WorkFolder: runner.workFolder,
        Ephemeral: true,
        DisableUpdate: true,
      },
      { Scheme: "ImpTestOneTimeSecret", Data: { secret: runner.secret } },
    );
    return { runner, encoded };
  }

  /** A runner minted by a scale set's generatejitconfig: the scale set's labels, its jobs only. */
  #registerScaleSetRunner(scaleSet: TestScaleSet, name: string, workFolder: string): { id: number; name: string; encoded: string } {
    const { runner, encoded } = this.registerRunner(scaleSet.scopeKey, { name, runner_group_id: scaleSet.runnerGroupId, labels: scaleSet.labels.map((l) => l.name), work_folder: workFolder });
    this.runners.set(runner.id, { ...runner, scaleSetId: scaleSet.id });
    return { id: runner.id, name: runner.name, encoded };
  }

  /** GitHub's workflow runs of a repository, only `status=queued` (the one filter Imp uses): runs with a queued job. */
  #listQueuedRuns(operation: Operation, params: Record<string, string>, query: URLSearchParams): Reply {
    const status = query.get("status");
    const jobs = [...this.jobs.values()].filter((j) => j.repo.owner === params["owner"] && j.repo.repo === params["repo"] && (status === null || j.status === status));
    const runIds = [...new Set(jobs.map((j) => j.runId))].sort((a, b) => b - a);
    const { page, perPage } = paging(query);
    const schema = operation.responseSchemas.get(200) as { properties: { workflow_runs: { items: object } } };
    const runs = runIds.slice((page - 1) * perPage, page * perPage).map((runId) => {
      const first = jobs.find((j) => j.runId === runId);
      const attempt = Math.max(...jobs.filter((j) => j.runId === runId).map((j) => j.runAttempt ?? 1));
      return { ...(sampleFromSchema(schema.properties.workflow_runs.items, "run") as object), id: runId, run_attempt: attempt, status: status ?? first?.status ?? "queued", name: "CI", created_at: isoSeconds(first?.queuedAt ?? Date.now()) };
    });
    return { status: 200, body: { total_count: runIds.length, workflow_runs: runs } };
  }

  /** A workflow run: what Imp reads (event, branch, repository, head repository), the rest sampled from the documented schema. */
  #runJson(operation: Operation, params: Record<string, string>): Reply {
    const runId = Number(params["run_id"]);
    const jobs = [...this.jobs.values()].filter((j) => j.runId === runId && j.repo.owner === params["owner"] && j.repo.repo === params["repo"]);
    const first = jobs[0];
    if (first === undefined) return notFound();
    const trigger = first.trigger ?? PUSH_TO_MAIN;
    const sample = sampleFromSchema(operation.responseSchemas.get(200) ?? {}, "run") as Record<string, unknown>;
    const fullName = `${first.repo.owner}/${first.repo.repo}`;
    const repository = { ...(sample["repository"] as object), name: first.repo.repo, full_name: fullName, default_branch: "main" };
    const headName = trigger.headRepository ?? fullName;
    const done = jobs.every((j) => j.status === "completed");
    return {
      status: 200,
      body: {
        ...sample,
        id: runId,
        run_attempt: Math.max(...jobs.map((j) => j.runAttempt ?? 1)),
        event: trigger.event,
        head_branch: trigger.headBranch,
        status: done ? "completed" : jobs.some((j) => j.status === "in_progress") ? "in_progress" : "queued",
        conclusion: done ? (jobs.every((j) => j.conclusion === "success") ? "success" : "failure") : null,
        repository,
        head_repository: { ...(sample["head_repository"] as object), name: headName.split("/")[1] ?? "", full_name: headName },
      },
    };
  }

  #listRunJobs(operation: Operation, params: Record<string, string>, query: URLSearchParams): Reply {
    const runId = Number(params["run_id"]);
    const jobs = [...this.jobs.values()].filter((j) => j.runId === runId && j.repo.owner === params["owner"] && j.repo.repo === params["repo"]);
    const { page, perPage } = paging(query);
    const schema = operation.responseSchemas.get(200) as { properties: { jobs: { items: object } } };
    return { status: 200, body: { total_count: jobs.length, jobs: jobs.slice((page - 1) * perPage, page * perPage).map((j) => this.#jobJson(operation, j, schema.properties.jobs.items)) } };
  }

  /** A job as the REST API shows it: the fields Imp reads, the rest sampled from the documented schema. */
  #jobJson(operation: Operation, job: TestJob, schema: object = operation.responseSchemas.get(200) ?? {}): Record<string, unknown> {
    return {
      ...(sampleFromSchema(schema, "job") as object),
      id: job.id,
      run_id: job.runId,
      run_attempt: job.runAttempt ?? 1,
      name: job.name,
      status: job.status,
      conclusion: job.status === "completed" ? (job.conclusion ?? null) : null,
      labels: job.labels,
      runner_id: job.runnerId ?? null,
      runner_name: job.runnerName ?? null,
      runner_group_id: job.runnerId === undefined ? null : 1,
      runner_group_name: job.runnerId === undefined ? null : "Default",
      created_at: isoSeconds(job.queuedAt),
      started_at: isoSeconds(job.startedAt ?? job.queuedAt),
      completed_at: job.completedAt === undefined ? null : isoSeconds(job.completedAt),
      workflow_name: "CI",
      head_branch: "main",
      steps: [],
    };
  }

  #listRunners(scopeKey: string, query: URLSearchParams): Reply {
    const name = query.get("name");
    const all = [...this.runners.values()].filter((r) => r.scopeKey === scopeKey && (name === null || r.name === name));
    const { page, perPage } = paging(query);
    const items = all.slice((page - 1) * perPage, page * perPage);
    const last = Math.max(1, Math.ceil(all.length / perPage));
    const headers: Record<string, string> = {};
    if (page < last) headers["link"] = `<${this.#url}?page=${page + 1}&per_page=${perPage}>; rel="next", <${this.#url}?page=${last}&per_page=${perPage}>; rel="last"`;
    return { status: 200, headers, body: { total_count: all.length, runners: items.map(runnerJson) } };
  }

  // ---- runner sessions and test control -------------------------------------------------------

  async #handleTestPath(method: string, url: URL, body: unknown, hungUp: AbortSignal): Promise<Reply> {
    const path = url.pathname.slice("/_imp-test".length);
    const input = (body ?? {}) as Record<string, unknown>;
    let m: RegExpExecArray | null;
    if (method === "POST" && path === "/runner/sessions") return this.#openSession(input);
    if ((m = /^\/runner\/sessions\/([\w-]+)\/acquire$/.exec(path)) && method === "POST") {
      return this.#acquire(m[1] ?? "", Math.max(0, Math.min(30, Number(url.searchParams.get("waitSeconds") ?? "10") || 0)), hungUp);
    }
    if ((m = /^\/runner\/sessions\/([\w-]+)\/jobs\/(\d+)\/renew$/.exec(path)) && method === "POST") return this.#renew(m[1] ?? "", Number(m[2]));
    if ((m = /^\/runner\/sessions\/([\w-]+)\/jobs\/(\d+)\/result$/.exec(path)) && method === "POST") return this.#complete(m[1] ?? "", Number(m[2]), input);
    if ((m = /^\/runner\/sessions\/([\w-]+)$/.exec(path)) && method === "DELETE") return this.#closeSession(m[1] ?? "");
    if (method === "POST" && path === "/control/jobs") {
      const job = this.queueJob(input as unknown as Parameters<GitHubTestServer["queueJob"]>[0]);
      return { status: 201, body: { id: job.id } };
    }
    if ((m = /^\/control\/jobs\/(\d+)$/.exec(path)) && method === "GET") {
      const job = this.jobs.get(Number(m[1]));
      return job === undefined ? { status: 404 } : { status: 200, body: job };
    }
    if ((m = /^\/control\/jobs\/(\d+)\/cancel$/.exec(path)) && method === "POST") {
      if (!this.jobs.has(Number(m[1]))) return { status: 404 };
      return this.cancelJob(Number(m[1])) ? { status: 204 } : { status: 409, body: { message: "the job is completed already" } };
    }
    if ((m = /^\/control\/runners\/(\d+)$/.exec(path)) && method === "POST") {
      this.setRunnerState(Number(m[1]), input as { status?: "online" | "offline"; busy?: boolean });
      return { status: 204 };
    }
    if (method === "POST" && path === "/control/webhooks") {
      const { url: target, secret, drop, duplicate } = input as { url?: string; secret?: string; drop?: number; duplicate?: number };
      if (target !== undefined && secret !== undefined) this.webhooks.target = { url: target, secret };
      this.webhooks.dropNext += drop ?? 0;
      this.webhooks.duplicateNext += duplicate ?? 0;
      return { status: 204 };
    }
    if (method === "POST" && path === "/control/faults") {
      const fault = input as unknown as Fault & { path?: string };
      this.injectFault({ ...fault, ...(typeof fault.path === "string" ? { path: new RegExp(fault.path) } : {}) } as Fault);
      return { status: 204 };
    }
    if ((m = /^\/control\/barriers\/([\w.-]{1,64})$/.exec(path)) && method === "POST") return this.#arrive(m[1] ?? "", input);
    if (method === "POST" && path === "/control/tokens/expire") {
      this.expireTokens();
      return { status: 204 };
    }
    return { status: 404, body: { message: "no such test path" } };
  }

  /**
   * A barrier for jobs that must overlap in time (the isolation check: three jobs on three VMs, each
   * probing the others while they all run). A party posts {parties, party, value}; the answer is 204
   * until `parties` distinct parties arrived (after a long poll of up to 20 s; the caller asks again),
   * then 200 with every party's value.
   */
  async #arrive(name: string, input: Record<string, unknown>): Promise<Reply> {
    const parties = Number(input["parties"]);
    const party = String(input["party"] ?? "");
    if (!Number.isInteger(parties) || parties < 1 || parties > 64 || party === "") return { status: 400, body: { message: "need parties (1-64) and party" } };
    const values = this.#barriers.get(name) ?? new Map<string, string>();
    this.#barriers.set(name, values);
    values.set(party, String(input["value"] ?? "").slice(0, 256));
    const deadline = Date.now() + 20_000;
    while (values.size < parties && Date.now() < deadline) await sleep(50);
    return values.size < parties ? { status: 204 } : { status: 200, body: { values: Object.fromEntries(values) } };
  }

  #openSession(input: Record<string, unknown>): Reply {
    const runner = typeof input["runnerId"] === "number" ? this.runners.get(input["runnerId"]) : undefined;
    if (runner === undefined || runner.name !== input["runnerName"] || runner.secret !== input["secret"]) {
      return { status: 401, body: { error: "InvalidSetup", message: "no runner with this id, name and secret" } };
    }
    if (runner.session !== undefined) return { status: 409, body: { error: "SessionConflict", message: `runner ${runner.name} already has a session` } };
    if (runner.setupUsed) return { status: 409, body: { error: "SetupAlreadyUsed", message: `the one-time setup of runner ${runner.name} was used already` } };
    runner.setupUsed = true;
    runner.session = randomUUID();
    runner.status = "online";
    runner.seenUntil = Date.now();
    runner.version = typeof input["version"] === "string" ? input["version"] : "imp-test";
    return { status: 201, body: { sessionId: runner.session } };
  }

  #sessionRunner(sessionId: string): TestRunner | undefined {
    return [...this.runners.values()].find((r) => r.session === sessionId);
  }

  async #acquire(sessionId: string, waitSeconds: number, hungUp: AbortSignal): Promise<Reply> {
    const deadline = Date.now() + waitSeconds * 1000;
    const polling = this.#sessionRunner(sessionId);
    // In a long poll the runner is alive until the poll ends (or it hangs up).
    if (polling !== undefined) polling.seenUntil = Math.max(polling.seenUntil, deadline);
    for (;;) {
      const runner = this.#sessionRunner(sessionId);
      if (runner === undefined) return { status: 404, body: { error: "NoSession" } };
      if (hungUp.aborted) {
        runner.seenUntil = Date.now();
        return { status: 204 };
      }
      if (runner.jobId !== undefined) return { status: 409, body: { error: "JobAlreadyTaken", message: "an ephemeral runner takes exactly one job" } };
      const names = new Set(runner.labels.map((l) => l.name.toLowerCase()));
      const job = [...this.jobs.values()].find((j) => j.status === "queued" && this.#canRun(runner, j) && j.labels.every((l) => names.has(l.toLowerCase())));
      if (job !== undefined) {
        const now = Date.now();
        job.status = "in_progress";
        job.startedAt = now;
        job.runnerId = runner.id;
        job.runnerName = runner.name;
        job.renewedAt = now;
        runner.jobId = job.id;
        runner.busy = true;
        runner.seenUntil = now;
        this.#jobWebhook(job, "in_progress");
        this.actions.jobStarted(job);
        return { status: 200, body: { job: { id: job.id, name: job.name, steps: job.steps }, renewSeconds: this.#renewSeconds() } };
      }
      if (Date.now() >= deadline) return { status: 204 };
      await sleep(50);
    }
  }

  #canRun(runner: TestRunner, job: TestJob): boolean {
    // GitHub hands a job a scale set acquired only to that scale set's runners, and others' jobs never to them.
    if (!this.actions.runnerMayTake(runner.scaleSetId, job)) return false;
    return runner.scopeKey === `repo:${job.repo.owner}/${job.repo.repo}` || runner.scopeKey === `org:${job.repo.owner}` || runner.scopeKey.startsWith("enterprise:");
  }

  /**
   * How often a runner renews its job's lock: about ten times per timeout, GitHub's own ratio (a
   * 60 s renewal of a ~10 minute lock), so a slow renewal or two does not lose the job.
   */
  #renewSeconds(): number {
    return Math.max(1, Math.floor(this.jobLockTimeoutMs / 10_000));
  }

  /** The runner still holds its job (GitHub's job-lock renewal): 404 once it lost it, 409 once it was cancelled. */
  #renew(sessionId: string, jobId: number): Reply {
    const runner = this.#sessionRunner(sessionId);
    const job = this.jobs.get(jobId);
    if (runner === undefined || job === undefined || runner.jobId !== jobId) return { status: 404, body: { error: "NoSuchJob", message: "this session holds no such job" } };
    runner.seenUntil = Date.now();
    if (job.status === "completed" && job.conclusion === "cancelled") return { status: 409, body: { error: "JobCancelled", message: `job ${job.name} was cancelled` } };
    if (job.status !== "in_progress") return { status: 404, body: { error: "NoSuchJob", message: `job ${job.name} is ${job.status}` } };
    job.renewedAt = Date.now();
    return { status: 200, body: { lockedUntil: new Date(job.renewedAt + this.jobLockTimeoutMs).toISOString(), renewSeconds: this.#renewSeconds() } };
  }

  /**
   * What GitHub does about runners that went silent (their VM died): a job in progress whose lock
   * was not renewed within jobLockTimeoutMs fails ("lost communication with the server", webhook
   * `completed`), and its runner goes offline, no longer busy, and, being ephemeral with its job
   * done, is removed as on a close of its session. An open session whose runner stopped polling
   * is closed the same way (a runner that never took a job stays registered, offline, deletable).
   */
  #expireLost(now: number): void {
    const timeout = this.jobLockTimeoutMs;
    for (const job of this.jobs.values()) {
      if (job.status !== "in_progress" || now - (job.renewedAt ?? job.startedAt ?? now) <= timeout) continue;
      job.status = "completed";
      job.completedAt = now;
      job.conclusion = "failure";
      const log = `##[error]The self-hosted runner: ${job.runnerName ?? ""} lost communication with the server. Verify the machine is running and has a healthy network connection.\n`;
      job.result = { conclusion: "failure", steps: [], log };
      const runner = job.runnerId === undefined ? undefined : this.runners.get(job.runnerId);
      // Said on stderr: a test that did not mean to lose a runner learns why its job failed.
      process.stderr.write(`github test server: job ${job.id} (${job.name}) failed: runner ${job.runnerName ?? "?"} did not renew its lock for ${now - (job.renewedAt ?? now)} ms (jobLockTimeoutMs ${timeout})\n`);
      if (runner !== undefined && runner.jobId === job.id) {
        runner.busy = false;
        this.#endSession(runner);
      }
      this.#jobWebhook(job, "completed");
      this.actions.jobCompleted(job);
    }
    for (const runner of this.runners.values()) {
      if (runner.session === undefined) continue;
      const inJob = runner.jobId !== undefined && runner.busy;
      if (!inJob && now - runner.seenUntil > timeout) {
        process.stderr.write(`github test server: runner ${runner.name} lost: no request for ${now - runner.seenUntil} ms after its last poll (jobLockTimeoutMs ${timeout}); session closed\n`);
        this.#endSession(runner);
      }
    }
  }

  #complete(sessionId: string, jobId: number, input: Record<string, unknown>): Reply {
    const runner = this.#sessionRunner(sessionId);
    const job = this.jobs.get(jobId);
    if (runner === undefined || job === undefined || runner.jobId !== jobId || job.status !== "in_progress") return { status: 404, body: { error: "NoSuchJob" } };
    runner.seenUntil = Date.now();
    const conclusion = input["conclusion"] === "success" ? "success" : "failure";
    const steps = Array.isArray(input["steps"]) ? (input["steps"] as Array<{ name: string; exitCode: number }>) : [];
    // The step output, as GitHub shows a job's log; the runner caps what it sends, so do we.
    const log = typeof input["log"] === "string" ? input["log"].slice(0, MAX_JOB_LOG) : "";
    job.status = "completed";
    job.completedAt = Date.now();
    job.conclusion = conclusion;
    job.result = { conclusion, steps, log };
    runner.busy = false;
    this.#jobWebhook(job, "completed");
    this.actions.jobCompleted(job);
    return { status: 204 };
  }

  #closeSession(sessionId: string): Reply {
    const runner = this.#sessionRunner(sessionId);
    if (runner === undefined) return { status: 404, body: { error: "NoSession" } };
    this.#endSession(runner);
    return { status: 204 };
  }

  #endSession(runner: TestRunner): void {
    runner.session = undefined;
    runner.status = "offline";
    // GitHub removes an ephemeral runner once its job is done and it disconnects.
    if (runner.jobId !== undefined && !runner.busy) this.runners.delete(runner.id);
  }

  #jobWebhook(job: TestJob, action: "queued" | "in_progress" | "completed"): void {
    // GitHub's timestamps have whole seconds.
    const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
    const now = iso(Date.now());
    const documented = this.contract.webhooks.get(action)?.schema as { properties: Record<string, object> } | undefined;
    // The parts Imp does not read come from the documented schema, so the payload has GitHub's shape.
    const sample = (key: string, path: string): Record<string, unknown> => sampleFromSchema(documented?.properties[key] ?? {}, path) as Record<string, unknown>;
    const repository = sample("repository", "repository");
    const owner = { ...(repository["owner"] as Record<string, unknown>), login: job.repo.owner, type: "Organization" };
    const payload = {
      action,
      workflow_job: {
        id: job.id,
        run_id: job.runId,
        run_url: `${this.#url}/repos/${job.repo.owner}/${job.repo.repo}/actions/runs/${job.runId}`,
        run_attempt: job.runAttempt ?? 1,
        node_id: `WJ_${job.id}`,
        head_sha: "0".repeat(40),
        url: `${this.#url}/repos/${job.repo.owner}/${job.repo.repo}/actions/jobs/${job.id}`,
        html_url: `https://github.invalid/${job.repo.owner}/${job.repo.repo}/actions/runs/${job.runId}/job/${job.id}`,
        check_run_url: `${this.#url}/repos/${job.repo.owner}/${job.repo.repo}/check-runs/${job.id}`,
        name: job.name,
        workflow_name: "CI",
        head_branch: "main",
        labels: job.labels,
        status: action,
        conclusion: action === "completed" ? (job.conclusion ?? null) : null,
        // Null while queued, and on a job that completed without ever having a runner (cancelled while queued).
        runner_id: action === "queued" ? null : (job.runnerId ?? null),
        runner_name: action === "queued" ? null : (job.runnerName ?? null),
        runner_group_id: action === "queued" || job.runnerId === undefined ? null : 1,
        runner_group_name: action === "queued" || job.runnerId === undefined ? null : "Default",
        created_at: iso(job.queuedAt),
        started_at: iso(job.startedAt ?? job.queuedAt),
        completed_at: action === "completed" ? iso(job.completedAt ?? Date.now()) : null,
        steps: (job.result?.steps ?? []).map((step, i) => ({
          name: step.name,
          number: i + 1,
          status: "completed",
          conclusion: step.exitCode === 0 ? "success" : "failure",
          started_at: now,
          completed_at: now,
        })),
      },
      repository: { ...repository, id: 1, name: job.repo.repo, full_name: `${job.repo.owner}/${job.repo.repo}`, owner },
      organization: { ...sample("organization", "organization"), login: job.repo.owner },
      installation: { ...sample("installation", "installation"), id: this.#options.installationId },
      sender: { ...sample("sender", "sender"), login: "octocat" },
    };
    for (const problem of this.contract.checkWebhook(action, payload)) {
      this.#violation({ direction: "webhook", method: "POST", path: "(webhook)", operationId: `workflow_job.${action}`, problem });
    }
    this.webhooks.deliver("workflow_job", payload);
  }
}

/** GitHub's timestamps have whole seconds. */
function isoSeconds(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function runnerJson(runner: TestRunner): Record<string, unknown> {
  return {
    id: runner.id,
    runner_group_id: runner.runnerGroupId,
    name: runner.name,
    os: "linux",
    status: runner.status,
    busy: runner.busy,
    ephemeral: true,
    labels: runner.labels,
    version: runner.version,
  };
}

function notFound(): Reply {
  return { status: 404, body: { message: "Not Found", documentation_url: DOCS } };
}

function paging(query: URLSearchParams): { page: number; perPage: number } {
  return { page: Math.max(1, Number(query.get("page") ?? "1")), perPage: Math.min(100, Math.max(1, Number(query.get("per_page") ?? "30"))) };
}

async function readBody(req: IncomingMessage): Promise<Buffer | "too-large"> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) return "too-large";
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function send(res: ServerResponse, reply: Reply): void {
  if (res.destroyed) return;
  const payload = reply.body === undefined ? undefined : JSON.stringify(reply.body);
  res.writeHead(reply.status, { ...(payload === undefined ? {} : { "content-type": "application/json; charset=utf-8" }), ...reply.headers });
  res.end(payload);
}
