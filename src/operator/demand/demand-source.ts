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
import { forgeOf } from "../forges/index.ts";

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
