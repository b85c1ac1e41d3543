/**
 * The forge of each runner pool (`PoolForge`, src/forge), built from the pool's spec and its
 * credentials Secret. One GitHub client per credentials Secret, kept while the Secret is unchanged: the client
 * holds the installation token cache (src/forge/github refreshes the token before it expires), so
 * reconciles do not mint a token each. The App's private key is read from the Secret into the
 * client's memory only; it never leaves the operator.
 *
 * Enterprise pools: GitHub does not enable its enterprise runner endpoints for Apps, so their
 * Secret holds a token (key `token`, scope `manage_runners:enterprise`) instead of App keys. A
 * Secret with a `token` key is used as a token for any scope; without one, as App credentials.
 */
import { GiteaClient, GiteaForge, GitHubJitForge, GitHubScaleSetForge, describeGiteaScope, type GiteaScope, type PoolForge } from "../../forge/index.ts";
import { CredentialText, DEFAULT_RUNNER_GROUP_ID, describeScope, GitHubClient, ScaleSetClient, type GitHubClientOptions, type GitHubScope, type ScaleSetClientOptions } from "../../forge/index.ts";
import { GITHUB_APP_SECRET_KEYS, type ImpVMRunnerPool } from "../../api/index.ts";
import { isNotFound, type ResourceClient } from "../../kube/index.ts";
import { systemClock, terminalError, type Clock, type Logger } from "../../shared/index.ts";
import { githubOf, scopeOfPool } from "./pool-scope.ts";
import type { SecretObject } from "../resources.ts";

/** Key of a credentials Secret that holds a token instead of App credentials (enterprise scope). */
export const TOKEN_SECRET_KEY = "token";

export interface PoolForgesOptions {
  readonly secrets: Pick<ResourceClient<SecretObject>, "get">;
  /** Replaces every pool's spec.github.apiURL (a GitHub Enterprise Server, or a test server). */
  readonly baseUrlOverride?: string | undefined;
  /** Replaces every Gitea pool's spec.gitea.url (tests). */
  readonly giteaUrlOverride?: string;
  /** Re-read a credentials Secret at most this often. */
  readonly secretTtlMs?: number;
  readonly clientOptions?: Partial<Omit<GitHubClientOptions, "credentials" | "baseUrl">> | undefined;
  /** Timeouts and retries of the scale-set (Actions service) clients. */
  readonly scaleSetClientOptions?: Partial<Pick<ScaleSetClientOptions, "requestTimeoutMs" | "longPollTimeoutMs" | "retry">>;
  readonly clock?: Clock;
  readonly logger: Logger;
}

/** What a pool's controllers use to talk to GitHub. */
export interface PoolGitHub {
  readonly client: GitHubClient;
  readonly scope: GitHubScope;
  /** The id of the pool's runner group (looked up once per client and group name). */
  runnerGroupId(signal?: AbortSignal): Promise<number>;
}

/** A Gitea pool's client, per credentials Secret and URL, and the registration tokens it fetched (reusable: kept in memory only). */
interface GiteaEntry {
  readonly resourceVersion: string;
  readonly url: string;
  readonly client: GiteaClient;
  readonly registrationTokens: Map<string, CredentialText>;
  readAt: number;
}

interface Entry {
  readonly resourceVersion: string;
  readonly baseUrl: string;
  readonly client: GitHubClient;
  readonly groups: Map<string, number>;
  /** One scale-set client per scope (it holds the Actions service's admin token). */
  readonly scaleSets: Map<string, ScaleSetClient>;
  readAt: number;
}

export class PoolForges {
  readonly #o: PoolForgesOptions;
  readonly #clock: Clock;
  readonly #entries = new Map<string, Entry>();
  readonly #gitea = new Map<string, GiteaEntry>();

  constructor(options: PoolForgesOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
  }

  /** The pool's forge: GitHub just-in-time runners, the runners of its GitHub scale set, or Gitea runners. */
  async forPool(pool: Readonly<ImpVMRunnerPool>, signal?: AbortSignal): Promise<PoolForge> {
    if (pool.spec.gitea !== undefined) return this.#giteaForge(pool, signal);
    const settings = githubOf(pool);
    const gh = await this.gitHubFor(pool, signal);
    const scaleSet = settings.scaleSet;
    if (scaleSet !== undefined) {
      const client = await this.scaleSetClientFor(pool, signal);
      return new GitHubScaleSetForge({ client, rest: gh.client, scope: gh.scope, scaleSetName: scaleSet.name, runnerGroup: settings.runnerGroup });
    }
    return new GitHubJitForge({ client: gh.client, scope: gh.scope, runnerGroupId: (s) => gh.runnerGroupId(s), labels: settings.labels });
  }

  async #giteaForge(pool: Readonly<ImpVMRunnerPool>, signal?: AbortSignal): Promise<PoolForge> {
    const spec = pool.spec.gitea;
    if (spec === undefined) throw terminalError("PoolSpecInvalid", `Cannot use pool ${pool.metadata.name} as a Gitea pool: it has no spec.gitea`);
    const [owner = "", repo = ""] = (spec.repository ?? "").split("/");
    const scope: GiteaScope = spec.scope === "repo" ? { kind: "repo", owner, repo } : { kind: "org", org: spec.organization ?? "" };
    const url = this.#o.giteaUrlOverride ?? spec.url;
    const namespace = pool.metadata.namespace ?? "";
    const secretName = spec.credentialsSecretRef.name;
    const key = `${namespace}/${secretName}|${url}`;
    const now = this.#clock.now();
    let entry = this.#gitea.get(key);
    if (entry === undefined || now - entry.readAt >= (this.#o.secretTtlMs ?? 30_000)) {
      const secret = await this.#readSecret(namespace, secretName, pool, "Gitea", signal);
      if (entry !== undefined && entry.resourceVersion === (secret.metadata?.resourceVersion ?? "")) entry.readAt = now;
      else {
        const raw = secret.data?.[TOKEN_SECRET_KEY];
        if (raw === undefined || raw === "") throw terminalError("CredentialsSecretInvalid", `Cannot reach Gitea for pool ${pool.metadata.name}: Secret ${namespace}/${secretName} has no key ${TOKEN_SECRET_KEY}`);
        const token = new CredentialText(Buffer.from(raw, "base64").toString("utf8").trim(), "Gitea access token");
        entry = { resourceVersion: secret.metadata?.resourceVersion ?? "", url, client: new GiteaClient({ baseUrl: url, token, clock: this.#clock }), registrationTokens: new Map(), readAt: now };
        this.#gitea.set(key, entry);
      }
    }
    const e = entry;
    const scopeKey = describeGiteaScope(scope);
    return new GiteaForge({
      client: e.client,
      scope,
      url,
      labels: spec.labels,
      registrationToken: async (s) => {
        const known = e.registrationTokens.get(scopeKey);
        if (known !== undefined) return known;
        const fresh = await e.client.registrationToken(scope, s);
        e.registrationTokens.set(scopeKey, fresh);
        return fresh;
      },
      forgetRegistrationToken: () => void e.registrationTokens.delete(scopeKey),
    });
  }

  async #readSecret(namespace: string, name: string, pool: Readonly<ImpVMRunnerPool>, forge: string, signal?: AbortSignal): Promise<SecretObject> {
    try {
      return await this.#o.secrets.get({ namespace, name }, signal);
    } catch (err) {
      if (isNotFound(err)) throw terminalError("CredentialsSecretMissing", `Cannot reach ${forge} for pool ${pool.metadata.name}: Secret ${namespace}/${name} does not exist`);
      throw err;
    }
  }

  /** The Actions-service client of the pool's credentials and scope (kept while the credentials Secret is unchanged). */
  async scaleSetClientFor(pool: Readonly<ImpVMRunnerPool>, signal?: AbortSignal): Promise<ScaleSetClient> {
    const scope = scopeOfPool(pool);
    const entry = await this.#entry(pool, signal);
    const key = describeScope(scope);
    let client = entry.scaleSets.get(key);
    if (client === undefined) {
      client = new ScaleSetClient({ registrationTokens: entry.client, apiBaseUrl: entry.baseUrl, scope, clock: this.#clock, logger: this.#o.logger, ...this.#o.scaleSetClientOptions });
      entry.scaleSets.set(key, client);
    }
    return client;
  }

  /** The GitHub client of the pool's credentials and its scope. */
  async gitHubFor(pool: Readonly<ImpVMRunnerPool>, signal?: AbortSignal): Promise<PoolGitHub> {
    const scope = scopeOfPool(pool);
    const entry = await this.#entry(pool, signal);
    const groupName = githubOf(pool).runnerGroup;
    return {
      client: entry.client,
      scope,
      runnerGroupId: async () => {
        if (scope.kind === "repo") return DEFAULT_RUNNER_GROUP_ID;
        const known = entry.groups.get(groupName);
        if (known !== undefined) return known;
        const group = await entry.client.findRunnerGroup(scope, groupName);
        if (group === undefined) throw terminalError("RunnerGroupNotFound", `Cannot register runners of pool ${pool.metadata.name}: GitHub has no runner group ${groupName}`);
        entry.groups.set(groupName, group.id);
        return group.id;
      },
    };
  }

  async #entry(pool: Readonly<ImpVMRunnerPool>, signal?: AbortSignal): Promise<Entry> {
    const namespace = pool.metadata.namespace ?? "";
    const gh = githubOf(pool);
    const name = gh.credentialsSecretRef.name;
    const key = `${namespace}/${name}`;
    const baseUrl = this.#o.baseUrlOverride ?? gh.apiURL;
    const now = this.#clock.now();
    const cached = this.#entries.get(key);
    if (cached !== undefined && cached.baseUrl === baseUrl && now - cached.readAt < (this.#o.secretTtlMs ?? 30_000)) return cached;
    const secret = await this.#readSecret(namespace, name, pool, "GitHub", signal);
    if (cached !== undefined && cached.baseUrl === baseUrl && cached.resourceVersion === secret.metadata?.resourceVersion) {
      cached.readAt = now;
      return cached;
    }
    const field = (k: string): string => {
      const raw = secret.data?.[k];
      if (raw === undefined || raw === "") throw terminalError("CredentialsSecretInvalid", `Cannot reach GitHub for pool ${pool.metadata.name}: Secret ${key} has no key ${k}`);
      return Buffer.from(raw, "base64").toString("utf8").trim();
    };
    const hasToken = (secret.data?.[TOKEN_SECRET_KEY] ?? "") !== "";
    if (!hasToken && gh.scope === "enterprise") {
      throw terminalError(
        "CredentialsSecretInvalid",
        `Cannot reach GitHub for pool ${pool.metadata.name}: Secret ${key} has no key ${TOKEN_SECRET_KEY}, and GitHub's enterprise runner endpoints refuse GitHub Apps (a token with manage_runners:enterprise is needed)`,
      );
    }
    const client = new GitHubClient({
      baseUrl,
      credentials: hasToken
        ? { token: field(TOKEN_SECRET_KEY) }
        : { appId: field(GITHUB_APP_SECRET_KEYS.appId), installationId: field(GITHUB_APP_SECRET_KEYS.installationId), privateKey: field(GITHUB_APP_SECRET_KEYS.privateKey) },
      clock: this.#clock,
      logger: this.#o.logger,
      ...this.#o.clientOptions,
    });
    const entry: Entry = { resourceVersion: secret.metadata?.resourceVersion ?? "", baseUrl, client, groups: new Map(), scaleSets: new Map(), readAt: now };
    this.#entries.set(key, entry);
    return entry;
  }
}
