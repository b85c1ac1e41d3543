/**
 * Which webhook secrets authenticate a delivery for which pools. A pool with `spec.webhook.enabled`
 * names its secret with `spec.webhook.secretRef` (and, while rotating, the one being replaced with
 * `previousSecretRef`); a delivery signed with either counts for that pool only. Secrets given to
 * the operator itself (`--webhook-secret-file`, the GitHub App's secret) count for every GitHub
 * pool and never for a Gitea one: trust groups are built per forge.
 *
 * Secrets are read through the API (GET, no watch: the operator needs no list/watch on Secrets) and
 * kept at most `ttlMs`, so a rotation is in effect within that time without a restart. A Secret or
 * key that cannot be read leaves its pool with the operator's secrets only (a Gitea pool with none),
 * and says so in the log.
 */
import { keyOf, isNotFound, type Informer, type ResourceClient } from "../../kube/index.ts";
import { describeError, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import type { ImpVMRunnerPool } from "../../api/index.ts";
import type { SecretObject } from "../resources.ts";
import { forgeOf, type ForgeFamily } from "../forges/index.ts";

export const DEFAULT_WEBHOOK_SECRET_TTL_MS = 10_000;

/** Pools (namespace/name keys) a delivery speaks for, or every pool. */
export type WebhookAudience = ReadonlySet<string> | "all";

/** One or two secrets (rotation) and the pools a delivery signed with one of them may change. */
export interface WebhookTrust {
  readonly secrets: readonly string[];
  readonly audience: WebhookAudience;
}

export interface PoolWebhookSecretsOptions {
  readonly poolCache: Pick<Informer<ImpVMRunnerPool>, "list">;
  readonly secrets: Pick<ResourceClient<SecretObject>, "get">;
  /** The operator's own secrets, trusted for every pool (may be empty). */
  readonly operatorSecrets?: readonly string[];
  readonly ttlMs?: number;
  readonly clock?: Clock;
  readonly logger: Logger;
}

interface Cached {
  readonly at: number;
  readonly data: Readonly<Record<string, string>> | undefined;
}

export class PoolWebhookSecrets {
  readonly #o: PoolWebhookSecretsOptions;
  readonly #clock: Clock;
  readonly #cache = new Map<string, Cached>();

  constructor(options: PoolWebhookSecretsOptions) {
    if ((options.operatorSecrets ?? []).length > 2) throw new TypeError("the operator takes one webhook secret, or two while rotating");
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
  }

  /**
   * The trust groups of one forge's pools now, operator secrets first (GitHub's only: the operator's
   * secrets are the GitHub App's); pools sharing the same secrets share one group.
   */
  async trusts(forge: ForgeFamily = "github", signal?: AbortSignal): Promise<WebhookTrust[]> {
    const groups = new Map<string, { secrets: string[]; pools: Set<string> }>();
    const live = new Set<string>();
    for (const pool of this.#o.poolCache.list()) {
      const webhook = pool.spec.webhook;
      if (webhook?.enabled !== true || webhook.secretRef === undefined || pool.metadata.deletionTimestamp !== undefined) continue;
      if (forgeOf(pool) !== forge) {
        for (const ref of [webhook.secretRef, webhook.previousSecretRef]) if (ref !== undefined) live.add(`${pool.metadata.namespace ?? ""}/${ref.name}`);
        continue;
      }
      const namespace = pool.metadata.namespace ?? "";
      const values: string[] = [];
      for (const ref of [webhook.secretRef, webhook.previousSecretRef]) {
        if (ref === undefined) continue;
        live.add(`${namespace}/${ref.name}`);
        const value = await this.#read(namespace, ref.name, ref.key, keyOf(pool), signal);
        if (value !== undefined && !values.includes(value)) values.push(value);
      }
      if (values.length === 0) continue;
      const id = JSON.stringify([...values].sort());
      const group = groups.get(id) ?? { secrets: values, pools: new Set<string>() };
      group.pools.add(keyOf(pool));
      groups.set(id, group);
    }
    for (const key of this.#cache.keys()) if (!live.has(key)) this.#cache.delete(key);
    const operator = this.#o.operatorSecrets ?? [];
    return [...(operator.length > 0 && forge === "github" ? [{ secrets: operator, audience: "all" as const }] : []), ...[...groups.values()].map((g) => ({ secrets: g.secrets, audience: g.pools }))];
  }

  async #read(namespace: string, name: string, key: string, pool: string, signal: AbortSignal | undefined): Promise<string | undefined> {
    const id = `${namespace}/${name}`;
    const now = this.#clock.now();
    let cached = this.#cache.get(id);
    if (cached === undefined || now - cached.at >= (this.#o.ttlMs ?? DEFAULT_WEBHOOK_SECRET_TTL_MS)) {
      try {
        const secret = await this.#o.secrets.get({ namespace, name }, signal);
        cached = { at: now, data: secret.data ?? {} };
      } catch (err) {
        // Not found is cached like a value (a deleted secret stops being accepted); other errors keep the last value.
        if (!isNotFound(err) && cached !== undefined) {
          this.#o.logger.warn({ pool, secret: id, err: describeError(err) }, "cannot re-read a pool's webhook Secret; using the last value read");
          return decode(cached.data?.[key]);
        }
        cached = { at: now, data: undefined };
        if (isNotFound(err)) this.#o.logger.warn({ pool, secret: id }, "a pool's webhook Secret does not exist; its deliveries are accepted only with the operator's own secret (GitHub pools), or not at all (Gitea pools)");
        else this.#o.logger.warn({ pool, secret: id, err: describeError(err) }, "cannot read a pool's webhook Secret; its deliveries are accepted only with the operator's own secret (GitHub pools), or not at all (Gitea pools)");
      }
      this.#cache.set(id, cached);
      if (cached.data !== undefined && decode(cached.data[key]) === undefined) this.#o.logger.warn({ pool, secret: id, key }, "a pool's webhook Secret has no such key (or it is empty)");
    }
    return decode(cached.data?.[key]);
  }
}

function decode(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  const value = Buffer.from(raw, "base64").toString("utf8").trim();
  return value === "" ? undefined : value;
}
