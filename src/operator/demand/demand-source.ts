/**
 * Where a pool's demand comes from, one kind per pool, decided by its spec alone:
 * - `scale-set`: GitHub's runner scale set (its listener's statistics and job messages);
 * - `webhook`: `workflow_job` deliveries (GitHub's or Gitea's), verified with the forge, with a
 *   listing of the forge's queue as the backstop for lost deliveries;
 * - `listing`: the forge's queue listed on an interval (Gitea pools without a webhook);
 * - `none`: no demand signal; the pool keeps `minIdle` runners (a GitHub pool without webhook).
 * Everything that differs between them lives behind `DemandSource`; the pool controller reads
 * one number (`waiting`) and when to look again.
 */
import type { ImpVM, ImpVMRunnerPool } from "../../api/index.ts";
import type { ReconcileContext, Stored } from "../../kube/index.ts";
import { keyOf } from "../../kube/index.ts";
import type { WorkflowJobEvent } from "../../forge/index.ts";
import { forgeOf, poolTakesJob, type ForgeFamily } from "../forges/index.ts";

export const DEMAND_KINDS = ["scale-set", "webhook", "listing", "none"] as const;
export type DemandKind = (typeof DEMAND_KINDS)[number];

export function demandKindOf(pool: Readonly<ImpVMRunnerPool>): DemandKind {
  if (pool.spec.github?.scaleSet !== undefined) return "scale-set";
  if (pool.spec.webhook?.enabled === true) return "webhook";
  if (forgeOf(pool) === "gitea") return "listing";
  return "none";
}

export type StoredPool = Readonly<Stored<ImpVMRunnerPool>>;
export type StoredVm = Readonly<Stored<ImpVM>>;

/** One source of demand, as the pool controller's observe step uses it. */
export interface DemandSource {
  /** Observe: bring what the source knows of the pool up to date where it is due (a listing). Never throws. */
  observe(ctx: ReconcileContext, pool: StoredPool, vms: readonly StoredVm[]): Promise<void>;
  /** Jobs waiting for a runner of the pool now. */
  waiting(pool: StoredPool): number;
  /** How long until the source wants the pool reconciled again to look (Infinity: it pushes). */
  nextLookInMs(pool: StoredPool, now: number): number;
  /** The pool is gone: drop what the source remembers of it. */
  forget(poolKey: string): void;
}

/** The cache's pools as the pool-facing functions take them (the cache's deep-readonly view of the same objects). */
export function cachedPools(cache: { list(): readonly unknown[] }): readonly StoredPool[] {
  return cache.list() as readonly StoredPool[];
}

/**
 * The one pool a waiting job counts in: the first by key, of the job's forge, not being deleted,
 * that `counts` admits and that takes the job. Listings and deliveries both ask this, so a job is
 * never counted in two pools (and by code point, so every replica orders keys alike).
 */
export function firstPoolTaking(pools: readonly StoredPool[], forge: ForgeFamily, job: Pick<WorkflowJobEvent, "labels" | "repository" | "organization" | "enterprise">, counts: (pool: StoredPool) => boolean): StoredPool | undefined {
  let first: StoredPool | undefined;
  for (const p of pools) {
    if (forgeOf(p) !== forge || p.metadata.deletionTimestamp !== undefined || !counts(p) || !poolTakesJob(p, job)) continue;
    if (first === undefined || keyOf(p) < keyOf(first)) first = p;
  }
  return first;
}
