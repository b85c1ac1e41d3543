/**
 * Registry authentication: anonymous, HTTP Basic, and the Docker token flow (a 401 carries
 * `WWW-Authenticate: Bearer realm=...,service=...,scope=...`; we GET the realm with service and scope,
 * with Basic credentials when we have them, and send the token back as `Authorization: Bearer`).
 * Tokens are cached per registry and scope until shortly before they expire. After the first
 * challenge the scheme is remembered per registry so later requests authenticate up front.
 */
import type { Clock } from "../../../shared/index.ts";
import { retryableError, terminalError } from "../../../shared/index.ts";
import { parseWwwAuthenticate } from "./challenge.ts";
import { isLoopbackRegistry, readBounded, statusError } from "./http.ts";
import type { CredentialLookup, RegistryCredentials } from "./types.ts";

type Scheme = { readonly kind: "basic" } | { readonly kind: "bearer"; readonly realm: string; readonly service: string | undefined };

interface CachedToken {
  readonly header: string;
  readonly expiresAt: number;
}

export interface RegistryAuthOptions {
  readonly credentials?: CredentialLookup;
  readonly clock: Clock;
  readonly fetch?: typeof fetch;
  /** Registries whose token realm may be plain HTTP (default: loopback registries only). */
  readonly plainHttp?: (registry: string) => boolean;
}

/** Default token lifetime when the server names none (the token spec's minimum). */
const DEFAULT_TOKEN_SECONDS = 60;
const EXPIRY_MARGIN_MS = 5_000;
const MAX_TOKEN_RESPONSE = 1024 * 1024;
const TOKEN_TIMEOUT_MS = 30_000;

export class RegistryAuth {
  readonly #options: RegistryAuthOptions;
  readonly #schemes = new Map<string, Scheme>();
  readonly #tokens = new Map<string, CachedToken>();
  readonly #pending = new Map<string, Promise<string>>();
  /** Count of token requests made, for tests and metrics. */
  tokenRequests = 0;

  constructor(options: RegistryAuthOptions) {
    this.#options = options;
  }

  /** The Authorization header to send up front for `repository` on `registry`, if any is known. */
  async headerFor(registry: string, repository: string, signal?: AbortSignal): Promise<string | undefined> {
    const scheme = this.#schemes.get(registry);
    if (scheme === undefined) return undefined;
    if (scheme.kind === "basic") return basicHeader(this.#credentials(registry));
    const scope = pullScope(repository);
    const key = tokenKey(registry, scheme, scope);
    const cached = this.#tokens.get(key);
    if (cached !== undefined && cached.expiresAt > this.#options.clock.now()) return cached.header;
    // Layers start together: one token request per scope, shared by every caller waiting for it.
    let pending = this.#pending.get(key);
    if (pending === undefined) {
      pending = this.#fetchToken(registry, scheme, scope, signal).finally(() => this.#pending.delete(key));
      this.#pending.set(key, pending);
    }
    return pending;
  }

  /**
   * Handles a 401: reads the challenge and returns a fresh Authorization header (a new token, never a
   * cached one) to retry with once. Throws a terminal error when we cannot answer it.
   */
  async answerChallenge(registry: string, repository: string, header: string | null, signal?: AbortSignal): Promise<string> {
    const challenges = parseWwwAuthenticate(header);
    const bearer = challenges.find((c) => c.scheme === "bearer");
    const basic = challenges.find((c) => c.scheme === "basic");
    if (bearer !== undefined && bearer.params.realm !== undefined) {
      const scheme: Scheme = { kind: "bearer", realm: bearer.params.realm, service: bearer.params.service };
      this.#schemes.set(registry, scheme);
      return this.#fetchToken(registry, scheme, bearer.params.scope ?? pullScope(repository), signal);
    }
    if (basic !== undefined) {
      const creds = this.#credentials(registry);
      if (creds === undefined) {
        throw terminalError("AuthRequired", `Cannot pull from ${registry}/${repository}: the registry requires credentials and none are configured for ${registry}`, { context: { registry } });
      }
      this.#schemes.set(registry, { kind: "basic" });
      return basicHeader(creds) as string;
    }
    throw terminalError("Unauthorized", `Cannot pull from ${registry}/${repository}: registry answered 401 without a usable Basic or Bearer challenge`, { context: { registry } });
  }

  /** The terminal error for a request that still got 401 after answering the challenge. */
  rejected(registry: string, repository: string): Error {
    const creds = this.#credentials(registry);
    const scheme = this.#schemes.get(registry);
    this.#dropTokens(registry);
    const why = creds === undefined
      ? "anonymous access is not allowed and no credentials are configured for this registry"
      : `the registry rejected the ${scheme?.kind === "bearer" ? "token issued for" : "credentials of"} user ${creds.username}`;
    return terminalError("Unauthorized", `Cannot pull from ${registry}/${repository}: ${why}`, { context: { registry, repository } });
  }

  #dropTokens(registry: string): void {
    for (const key of [...this.#tokens.keys()]) if (key.startsWith(`${registry}|`)) this.#tokens.delete(key);
  }

  #credentials(registry: string): RegistryCredentials | undefined {
    return this.#options.credentials?.(registry);
  }

  async #fetchToken(registry: string, scheme: Scheme & { kind: "bearer" }, scope: string, signal?: AbortSignal): Promise<string> {
    let url: URL;
    try {
      url = new URL(scheme.realm);
    } catch {
      throw terminalError("InvalidChallenge", `Cannot authenticate to ${registry}: token realm ${JSON.stringify(scheme.realm.slice(0, 200))} is not a URL`);
    }
    const plainAllowed = (this.#options.plainHttp ?? isLoopbackRegistry)(registry);
    if (url.protocol !== "https:" && !(url.protocol === "http:" && plainAllowed)) {
      throw terminalError("InvalidChallenge", `Cannot authenticate to ${registry}: token realm ${url.origin} is not HTTPS`);
    }
    if (scheme.service !== undefined) url.searchParams.set("service", scheme.service);
    url.searchParams.set("scope", scope);
    const headers: Record<string, string> = { accept: "application/json" };
    const creds = this.#credentials(registry);
    const basic = basicHeader(creds);
    if (basic !== undefined) headers.authorization = basic;
    this.tokenRequests++;
    const timeout = AbortSignal.timeout(TOKEN_TIMEOUT_MS);
    const res = await (this.#options.fetch ?? fetch)(url, { headers, signal: signal === undefined ? timeout : AbortSignal.any([signal, timeout]) });
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel().catch(() => undefined);
      throw terminalError("Unauthorized", `Cannot get a token for ${scope} from ${url.origin}: ${res.status} (${creds === undefined ? "no credentials configured" : `credentials of user ${creds.username} rejected`})`, {
        context: { registry, status: res.status },
      });
    }
    if (!res.ok) throw await statusError(res, `get a token for ${scope} from ${url.origin}`, this.#options.clock.now());
    const body = Buffer.from(await readBounded(res, MAX_TOKEN_RESPONSE, "token response")).toString("utf8");
    let parsed: { token?: unknown; access_token?: unknown; expires_in?: unknown };
    try {
      parsed = JSON.parse(body) as typeof parsed;
    } catch {
      throw retryableError("InvalidTokenResponse", `Cannot get a token from ${url.origin}: the response is not JSON`);
    }
    const token = typeof parsed.token === "string" ? parsed.token : parsed.access_token;
    if (typeof token !== "string" || token === "" || token.length > 64 * 1024) {
      throw terminalError("InvalidTokenResponse", `Cannot get a token from ${url.origin}: the response has no token`);
    }
    const seconds = typeof parsed.expires_in === "number" && parsed.expires_in > 0 ? parsed.expires_in : DEFAULT_TOKEN_SECONDS;
    const header = `Bearer ${token}`;
    this.#tokens.set(tokenKey(registry, scheme, scope), { header, expiresAt: this.#options.clock.now() + seconds * 1000 - EXPIRY_MARGIN_MS });
    return header;
  }
}

const pullScope = (repository: string): string => `repository:${repository}:pull`;
const tokenKey = (registry: string, scheme: Scheme & { kind: "bearer" }, scope: string): string => `${registry}|${scheme.realm}|${scheme.service ?? ""}|${scope}`;
const basicHeader = (creds: RegistryCredentials | undefined): string | undefined =>
  creds === undefined ? undefined : `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString("base64")}`;
