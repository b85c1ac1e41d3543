import { createPrivateKey, type KeyObject } from "node:crypto";
import { ImpError, systemClock, silentLogger, terminalError, type Clock, type Logger } from "../../shared/index.ts";
import { GitHubErrorCode, classifyGitHubError, gitHubMessageOf, httpStatusOf, type GitHubCall } from "./errors.ts";
import { RunnerJitConfig } from "./jit-config.ts";
import { CredentialText } from "./credential-text.ts";
import { DEFAULT_TOKEN_REFRESH_MARGIN_MS } from "./installation-token-cache.ts";
import { createOctokit, type GitHubCredentials, type ImpOctokitInstance } from "./octokit.ts";
import { DEFAULT_RATE_LIMIT_POLICY, type RateLimitPolicy } from "./rate-limit-decision.ts";
import { asObject, parsePage, parseRunner, parseRunnerGroup, parseWorkflowJob, parseWorkflowRun, type GitHubRunner, type GitHubRunnerGroup, type GitHubWorkflowJob, type GitHubWorkflowRun } from "./response-shapes.ts";
import { actionsPrefix, describeScope, type GitHubScope } from "./scope.ts";

/**
 * The narrow interface Imp needs from GitHub, for one App installation. Every method either returns
 * a typed result or throws a classified ImpError (see errors.ts); none logs or returns a secret
 * except `generateJitConfig`, whose setup is wrapped in RunnerJitConfig.
 */
export interface GitHubClientOptions {
  /** App credentials for repo and org scopes; a token for the enterprise scope (see docs/github.md). */
  readonly credentials: GitHubCredentials;
  /** https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise Server. */
  readonly baseUrl?: string;
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly rateLimit?: RateLimitPolicy;
  readonly requestTimeoutMs?: number;
  readonly serverErrorRetries?: number;
  readonly serverErrorBackoffMs?: number;
  /** Mint a new installation token this long before the current one expires. */
  readonly tokenRefreshMarginMs?: number;
  /** Upper bound on pages read by a list call (100 items a page). */
  readonly maxPages?: number;
}

export const DEFAULT_GITHUB_BASE_URL = "https://api.github.com";
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_PAGES = 50;
const PAGE_SIZE = 100;

export interface JitConfigRequest {
  readonly name: string;
  readonly runnerGroupId: number;
  /** Custom labels; GitHub adds self-hosted, OS and architecture itself. 1 to 100 of them. */
  readonly labels: readonly string[];
  readonly workFolder?: string;
}

export interface JitRunner {
  readonly runnerId: number;
  readonly runnerName: string;
  readonly encodedJitConfig: RunnerJitConfig;
}

/** `deleted`: GitHub removed it now; `gone`: it was already gone (404); `busy`: it is running a job (422). */
export type DeleteRunnerResult = "deleted" | "gone" | "busy";

/** Runner groups exist at org and enterprise level only; a repository's runners use the default group. */
export type RunnerGroupScope = Extract<GitHubScope, { kind: "org" | "enterprise" }>;

/** GitHub's id of the default runner group, which is also the only group repository runners have. */
export const DEFAULT_RUNNER_GROUP_ID = 1;

// A key that cannot be parsed would otherwise surface on the first call as a non-HTTP error, which
// looks like a network failure (retryable); it is a configuration error, so say so up front.
function checkCredentials(credentials: GitHubCredentials): void {
  if ("token" in credentials) {
    if (credentials.token.length === 0) throw terminalError(GitHubErrorCode.Unauthorized, "Cannot use the GitHub token: it is empty");
    return;
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(credentials.privateKey);
  } catch {
    throw terminalError(GitHubErrorCode.Unauthorized, `Cannot use the private key of GitHub App ${String(credentials.appId)}: it is not a PEM private key`, { context: { appId: String(credentials.appId) } });
  }
  if (key.asymmetricKeyType !== "rsa") {
    throw terminalError(GitHubErrorCode.Unauthorized, `Cannot use the private key of GitHub App ${String(credentials.appId)}: it is ${key.asymmetricKeyType ?? "not"} an RSA key, GitHub App JWTs are RS256`, { context: { appId: String(credentials.appId) } });
  }
}

export class GitHubClient {
  readonly #octokit: ImpOctokitInstance;
  readonly #maxPages: number;

  /** Throws GitHubUnauthorized (terminal) at once for a private key that is not an RSA PEM key. */
  constructor(options: GitHubClientOptions) {
    checkCredentials(options.credentials);
    this.#maxPages = options.maxPages ?? DEFAULT_MAX_PAGES;
    this.#octokit = createOctokit({
      baseUrl: options.baseUrl ?? DEFAULT_GITHUB_BASE_URL,
      credentials: options.credentials,
      clock: options.clock ?? systemClock,
      logger: options.logger ?? silentLogger,
      rateLimit: options.rateLimit ?? DEFAULT_RATE_LIMIT_POLICY,
      requestTimeoutMs: options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
      serverErrorRetries: options.serverErrorRetries ?? 3,
      serverErrorBackoffMs: options.serverErrorBackoffMs ?? 1000,
      tokenRefreshMarginMs: options.tokenRefreshMarginMs ?? DEFAULT_TOKEN_REFRESH_MARGIN_MS,
    });
  }

  async #call(call: GitHubCall, route: string, parameters: Record<string, unknown>): Promise<{ status: number; data: unknown }> {
    try {
      const response = await this.#octokit.request(route, parameters);
      return { status: response.status, data: response.data };
    } catch (err) {
      throw classifyGitHubError(err, call);
    }
  }

  /** Registers a just-in-time runner and returns its one-time setup. 409 if the name is taken. */
  async generateJitConfig(scope: GitHubScope, request: JitConfigRequest): Promise<JitRunner> {
    const call = { action: "create a one-time runner setup for", object: `runner ${request.name} in ${describeScope(scope)}`, context: { scope: describeScope(scope), runnerName: request.name } };
    // GitHub's own limits (the operation's schema), checked here so the error names them.
    if (request.name.length === 0 || request.labels.length < 1 || request.labels.length > 100 || request.labels.some((l) => l.length === 0)) {
      throw terminalError(GitHubErrorCode.Invalid, `Cannot ${call.action} ${call.object}: a runner needs a name and 1 to 100 non-empty labels (got ${request.labels.length})`, { context: call.context });
    }
    const { data } = await this.#call(call, `POST ${actionsPrefix(scope)}/runners/generate-jitconfig`, {
      name: request.name,
      runner_group_id: request.runnerGroupId,
      labels: [...request.labels],
      ...(request.workFolder === undefined ? {} : { work_folder: request.workFolder }),
    });
    const body = asObject(data, "generate-jitconfig response");
    const runner = parseRunner(body["runner"], "generated runner");
    const encoded = body["encoded_jit_config"];
    if (typeof encoded !== "string" || encoded.length === 0) {
      throw terminalError(GitHubErrorCode.UnexpectedResponse, `Cannot ${call.action} ${call.object}: GitHub's response has no encoded_jit_config`, { context: call.context });
    }
    return { runnerId: runner.id, runnerName: runner.name, encodedJitConfig: new RunnerJitConfig(encoded) };
  }

  /**
   * A runner registration token: the first link of the runner scale-set chain (it buys the Actions
   * service's admin token). A credential: returned wrapped, never logged.
   */
  async createRegistrationToken(scope: GitHubScope): Promise<{ readonly token: CredentialText; readonly expiresAt: number | undefined }> {
    const call = { action: "create a runner registration token for", object: describeScope(scope), context: { scope: describeScope(scope) } };
    const { data } = await this.#call(call, `POST ${actionsPrefix(scope)}/runners/registration-token`, {});
    const body = asObject(data, "registration token");
    const token = body["token"];
    if (typeof token !== "string" || token.length === 0 || token.length > 4096) {
      throw terminalError(GitHubErrorCode.UnexpectedResponse, `Cannot ${call.action} ${call.object}: GitHub's response has no token`, { context: call.context });
    }
    const expiresAt = typeof body["expires_at"] === "string" ? Date.parse(body["expires_at"]) : Number.NaN;
    return { token: new CredentialText(token, "registration token"), expiresAt: Number.isFinite(expiresAt) ? expiresAt : undefined };
  }

  /** Every self-hosted runner of the scope (optionally only those named `name`), all pages. */
  async listRunners(scope: GitHubScope, filter: { readonly name?: string } = {}): Promise<GitHubRunner[]> {
    const call = { action: "list runners of", object: describeScope(scope), context: { scope: describeScope(scope) } };
    const items = await this.#paginate(call, `GET ${actionsPrefix(scope)}/runners`, "runners", filter.name === undefined ? {} : { name: filter.name });
    return items.map((item) => parseRunner(item));
  }

  /** The runner, or undefined when GitHub has no runner with this id (any more). */
  async getRunner(scope: GitHubScope, runnerId: number): Promise<GitHubRunner | undefined> {
    const call = { action: "read", object: `runner ${runnerId} of ${describeScope(scope)}`, context: { scope: describeScope(scope), runnerId } };
    try {
      const { data } = await this.#call(call, `GET ${actionsPrefix(scope)}/runners/${runnerId}`, {});
      return parseRunner(data);
    } catch (err) {
      if (err instanceof ImpError && err.code === GitHubErrorCode.NotFound) return undefined;
      throw err;
    }
  }

  /**
   * Removes a runner registration. Idempotent: a runner already gone counts as done. A runner in the
   * middle of a job cannot be removed (GitHub answers 422); that is a result, not a failure, so the
   * caller can wait for the job to end.
   */
  async deleteRunner(scope: GitHubScope, runnerId: number): Promise<DeleteRunnerResult> {
    const call = { action: "delete", object: `runner ${runnerId} of ${describeScope(scope)}`, context: { scope: describeScope(scope), runnerId } };
    try {
      await this.#octokit.request(`DELETE ${actionsPrefix(scope)}/runners/${runnerId}`);
      return "deleted";
    } catch (err) {
      const status = httpStatusOf(err);
      if (status === 404) return "gone";
      // GitHub's 422 here is "Bad request - Runner \"x\" is still running a job".
      if (status === 422 && /busy|running a job|still running/i.test(gitHubMessageOf(err) ?? "")) return "busy";
      throw classifyGitHubError(err, call);
    }
  }

  /**
   * The jobs of a repository that wait for a runner: its workflow runs with status `queued`, then
   * their jobs with status `queued` (a queued run may hold jobs that run already). Bounded: at most
   * `maxRuns` runs are looked at, newest first (GitHub lists runs newest first).
   */
  async listQueuedJobs(repo: { readonly owner: string; readonly repo: string }, options: { readonly maxRuns?: number } = {}): Promise<GitHubWorkflowJob[]> {
    const scope: GitHubScope = { kind: "repo", owner: repo.owner, repo: repo.repo };
    const call = { action: "list queued workflow jobs of", object: describeScope(scope), context: { scope: describeScope(scope) } };
    const { data } = await this.#call(call, `GET ${actionsPrefix(scope)}/runs`, { status: "queued", per_page: Math.min(PAGE_SIZE, options.maxRuns ?? 20), page: 1 });
    const runs = asObject(data, "workflow runs")["workflow_runs"];
    if (!Array.isArray(runs)) throw terminalError(GitHubErrorCode.UnexpectedResponse, `Cannot ${call.action} ${call.object}: GitHub's response has no array "workflow_runs"`, { context: call.context });
    const jobs: GitHubWorkflowJob[] = [];
    for (const run of runs) {
      const runId = asObject(run, "workflow run")["id"];
      if (typeof runId !== "number") continue;
      const items = await this.#paginate(call, `GET ${actionsPrefix(scope)}/runs/${runId}/jobs`, "jobs", { filter: "latest" });
      for (const item of items) {
        const job = parseWorkflowJob(item);
        if (job.status === "queued") jobs.push(job);
      }
    }
    return jobs;
  }

  /** One workflow job, or undefined when GitHub has none with this id in the repository. */
  async getWorkflowJob(repo: { readonly owner: string; readonly repo: string }, jobId: number): Promise<GitHubWorkflowJob | undefined> {
    const scope: GitHubScope = { kind: "repo", owner: repo.owner, repo: repo.repo };
    const call = { action: "read", object: `workflow job ${jobId} of ${describeScope(scope)}`, context: { scope: describeScope(scope), jobId } };
    try {
      const { data } = await this.#call(call, `GET ${actionsPrefix(scope)}/jobs/${jobId}`, {});
      return parseWorkflowJob(data);
    } catch (err) {
      if (err instanceof ImpError && err.code === GitHubErrorCode.NotFound) return undefined;
      throw err;
    }
  }

  /** One workflow run of a repository, or undefined when GitHub has none with this id there. */
  async getWorkflowRun(repo: { readonly owner: string; readonly repo: string }, runId: number): Promise<GitHubWorkflowRun | undefined> {
    const scope: GitHubScope = { kind: "repo", owner: repo.owner, repo: repo.repo };
    const call = { action: "read", object: `workflow run ${runId} of ${describeScope(scope)}`, context: { scope: describeScope(scope), runId } };
    try {
      const { data } = await this.#call(call, `GET ${actionsPrefix(scope)}/runs/${runId}`, {});
      return parseWorkflowRun(data);
    } catch (err) {
      if (err instanceof ImpError && err.code === GitHubErrorCode.NotFound) return undefined;
      throw err;
    }
  }

  /** The runner group with exactly this name (GitHub compares group names case-insensitively), or undefined. */
  async findRunnerGroup(scope: RunnerGroupScope, name: string): Promise<GitHubRunnerGroup | undefined> {
    const call = { action: "look up", object: `runner group ${name} in ${describeScope(scope)}`, context: { scope: describeScope(scope), runnerGroup: name } };
    const items = await this.#paginate(call, `GET ${actionsPrefix(scope)}/runner-groups`, "runner_groups", {});
    const groups = items.map(parseRunnerGroup);
    return groups.find((g) => g.name === name) ?? groups.find((g) => g.name.toLowerCase() === name.toLowerCase());
  }

  async #paginate(call: GitHubCall, route: string, key: string, query: Record<string, unknown>): Promise<unknown[]> {
    const items: unknown[] = [];
    for (let page = 1; page <= this.#maxPages; page++) {
      const { data } = await this.#call(call, route, { ...query, per_page: PAGE_SIZE, page });
      const { total, items: pageItems } = parsePage(data, key, call.object);
      items.push(...pageItems);
      if (pageItems.length < PAGE_SIZE || items.length >= total) return items;
    }
    throw terminalError(GitHubErrorCode.UnexpectedResponse, `Cannot ${call.action} ${call.object}: more than ${this.#maxPages * PAGE_SIZE} items (maxPages ${this.#maxPages})`, { context: call.context ?? {} });
  }
}
