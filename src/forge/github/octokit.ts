import { Octokit } from "@octokit/core";
import { createAppAuth } from "@octokit/auth-app";
import { retry } from "@octokit/plugin-retry";
import { throttling } from "@octokit/plugin-throttling";
import type { Clock, Logger } from "../../shared/index.ts";
import { httpStatusOf } from "./errors.ts";
import { InstallationTokenCache } from "./installation-token-cache.ts";
import { decideRateLimitRetry, type RateLimitKind, type RateLimitPolicy } from "./rate-limit-decision.ts";

/**
 * Builds the one octokit instance an installation uses: App auth (JWT → installation token, cached
 * by expiry), plugin-throttling for GitHub's primary and secondary rate limits (its callbacks log
 * and ask `decideRateLimitRetry`), plugin-retry for 5xx and network failures, a per-request timeout,
 * and one retry with a fresh token when GitHub refuses a token it issued (revoked, or clock skew).
 */
const ImpOctokit = Octokit.plugin(retry, throttling);
export type ImpOctokitInstance = InstanceType<typeof ImpOctokit>;

export interface AppCredentials {
  readonly appId: number | string;
  readonly installationId: number | string;
  /** PEM, PKCS#1 or PKCS#8. Held in memory by auth-app only. */
  readonly privateKey: string;
}

/**
 * A token instead of an App: GitHub's enterprise-level runner endpoints are not enabled for GitHub
 * Apps (their OpenAPI operations say `enabledForGitHubApps: false`), so the enterprise scope needs
 * a token with the `manage_runners:enterprise` scope. Held in memory only.
 */
export interface TokenCredentials {
  readonly token: string;
}

export type GitHubCredentials = AppCredentials | TokenCredentials;

export interface OctokitSettings {
  readonly baseUrl: string;
  readonly credentials: GitHubCredentials;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly rateLimit: RateLimitPolicy;
  readonly requestTimeoutMs: number;
  /** Retries of 5xx/network failures/timeouts per request. */
  readonly serverErrorRetries: number;
  /** plugin-retry waits (retry number)² × this; 1000 in production. */
  readonly serverErrorBackoffMs: number;
  readonly tokenRefreshMarginMs: number;
}

// plugin-retry retries every status >= 400 not listed here. Only 5xx and network failures should be
// retried: a 4xx is an answer, and rate limits (403/429) belong to plugin-throttling alone, otherwise
// both plugins would retry the same 429 and multiply the retries.
const DO_NOT_RETRY = Array.from({ length: 100 }, (_, i) => 400 + i);

type Fetch = typeof globalThis.fetch;

function timedFetch(timeoutMs: number): Fetch {
  return (input, init) => {
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = init?.signal == null ? timeout : AbortSignal.any([init.signal, timeout]);
    return globalThis.fetch(input, { ...init, signal });
  };
}

/**
 * Whether a request URL is one of the App-JWT routes (/app, /app/…), below the base URL's own path
 * (GitHub Enterprise Server serves the API under /api/v3). A repository named "app" is not one.
 */
export function isAppAuthUrl(url: unknown, baseUrl: string): boolean {
  if (typeof url !== "string") return false;
  try {
    const basePath = new URL(baseUrl).pathname.replace(/\/+$/, "");
    let path = new URL(url, baseUrl).pathname;
    if (basePath !== "" && path.startsWith(basePath)) path = path.slice(basePath.length);
    return path === "/app" || path.startsWith("/app/");
  } catch {
    return false;
  }
}

export function createOctokit(settings: OctokitSettings): ImpOctokitInstance {
  const { logger, rateLimit } = settings;
  const cache = new InstallationTokenCache(settings.clock, settings.tokenRefreshMarginMs);
  const onLimit =
    (kind: RateLimitKind) =>
    (retryAfter: number, options: { method?: string; url?: string }, _octokit: unknown, retryCount: number): boolean => {
      const decision = decideRateLimitRetry(rateLimit, kind, retryAfter, retryCount);
      logger.warn({ kind, retryAfterSeconds: retryAfter, retryCount, method: options.method, route: options.url, retry: decision.retry }, `GitHub ${decision.reason}`);
      return decision.retry;
    };

  const credentials = settings.credentials;
  const auth =
    "token" in credentials
      ? { auth: credentials.token }
      : {
          authStrategy: createAppAuth,
          auth: { appId: credentials.appId, installationId: credentials.installationId, privateKey: credentials.privateKey, cache },
        };
  const limiterId = "token" in credentials ? "token" : `${String(credentials.appId)}|${String(credentials.installationId)}`;
  const baseUrl = settings.baseUrl.replace(/\/+$/, "");
  const octokit = new ImpOctokit({
    baseUrl,
    userAgent: "imp-operator",
    ...auth,
    // Only the message text goes to the log: octokit's extra arguments can hold request objects.
    log: {
      debug: (message: string) => logger.debug(message),
      info: (message: string) => logger.info(message),
      warn: (message: string) => logger.warn(message),
      error: (message: string) => logger.error(message),
    },
    // Not `request.retries`: plugin-retry reads that per request and would then retry every status, doNotRetry or not.
    request: { fetch: timedFetch(settings.requestTimeoutMs) },
    retry: { doNotRetry: DO_NOT_RETRY, retries: settings.serverErrorRetries, retryAfterBaseValue: settings.serverErrorBackoffMs },
    throttle: {
      // Limiters are shared per id: one installation on one GitHub shares its write pacing.
      id: `${settings.baseUrl}|${limiterId}`,
      onRateLimit: onLimit("primary"),
      onSecondaryRateLimit: onLimit("secondary"),
    },
  });

  // Outermost hook: a 401 on an installation-token request means GitHub no longer accepts a token
  // our cache still holds. Drop the cache and try once more with a fresh token; a second 401 stands.
  octokit.hook.wrap("request", async (request, options) => {
    try {
      return await request(options);
    } catch (err) {
      const failedUrl = (err as { request?: { url?: unknown } }).request?.url;
      if ("token" in credentials || httpStatusOf(err) !== 401 || isAppAuthUrl(options.url, baseUrl) || isAppAuthUrl(failedUrl, baseUrl)) throw err;
      logger.warn({ route: options.url }, "GitHub refused the cached installation token; minting a new one");
      cache.clear();
      return await request(options);
    }
  });
  return octokit;
}
