import type { Clock } from "../../shared/index.ts";

/**
 * Why our own cache: @octokit/auth-app keeps installation tokens in an LRU with a fixed 59-minute
 * lifetime and never reads the token's `expires_at`. GitHub tokens live one hour today, but a token
 * GitHub issues with a shorter life (or a server whose clock is ahead) would then be sent after it
 * expired. auth-app accepts a cache object; this one drops an entry `refreshMarginMs` before the
 * token's own expiry, so the next request mints a fresh token instead of failing with 401.
 *
 * auth-app stores entries as `token|createdAt|expiresAt|…`; the expiry is the third field.
 */
export const DEFAULT_TOKEN_REFRESH_MARGIN_MS = 5 * 60_000;

/** Pure: whether a token that expires at `expiresAtMs` must be replaced now. */
export function tokenNeedsRefresh(expiresAtMs: number, nowMs: number, refreshMarginMs: number): boolean {
  return !Number.isFinite(expiresAtMs) || nowMs >= expiresAtMs - refreshMarginMs;
}

export class InstallationTokenCache {
  readonly #entries = new Map<string, string>();
  readonly #clock: Clock;
  readonly #refreshMarginMs: number;

  constructor(clock: Clock, refreshMarginMs: number = DEFAULT_TOKEN_REFRESH_MARGIN_MS) {
    this.#clock = clock;
    this.#refreshMarginMs = refreshMarginMs;
  }

  // auth-app's cache type says `string`, but it checks for a falsy result to mean "missing".
  get(key: string): string {
    const value = this.#entries.get(key);
    if (value === undefined) return undefined as unknown as string;
    const expiresAt = Date.parse(value.split("|")[2] ?? "");
    if (tokenNeedsRefresh(expiresAt, this.#clock.now(), this.#refreshMarginMs)) {
      this.#entries.delete(key);
      return undefined as unknown as string;
    }
    return value;
  }

  set(key: string, value: string): void {
    this.#entries.set(key, value);
  }

  /** Forgets every token, e.g. after GitHub refused one that looked valid (revoked, clock skew). */
  clear(): void {
    this.#entries.clear();
  }

  get size(): number {
    return this.#entries.size;
  }
}
