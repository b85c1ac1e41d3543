/**
 * The demand port: how many jobs wait for a pool, and which of its runners are busy or finished,
 * whatever the source (demand-source.ts). The pool controller asks `observe` in its observe step,
 * reads `waiting` into its pure decision, and `nextLookInMs` for its requeue; webhook deliveries
 * and scale-set messages arrive through `onWorkflowJob` and `onScaleSetJob` (DemandEvents fans
 * them out). Each forge keeps its own ledger (runner-activity.ts): GitHub's and Gitea's job ids
 * are separate number spaces, and a job settled on one must never silence the other.
 */
import type { Registry } from "prom-client";
import type { ImpVMRunnerPool } from "../../api/index.ts";
import type { JobMessage, WorkflowJobEvent } from "../../forge/index.ts";
import { keyOf, type Informer, type ReconcileContext } from "../../kube/index.ts";
import type { Clock, Logger } from "../../shared/index.ts";
import { forgeOf, type ForgeFamily, type PoolForges } from "../forges/index.ts";
import { demandKindOf, type DemandSource, type StoredPool, type StoredVm } from "./demand-source.ts";
import { DemandTally } from "./demand-tally.ts";
import { QueueListing } from "./queue-listing.ts";
import { RunnerActivity } from "./runner-activity.ts";
import { ScaleSetDemand, type ScaleSetViews } from "./scale-set-demand.ts";
import { WebhookDemand, type DemandAudience } from "./webhook-demand.ts";

/** How often a webhook pool lists the jobs waiting on its forge: the most a dropped delivery delays a job. */
export const DEFAULT_DEMAND_LIST_INTERVAL_MS = 30_000;
/** How often a Gitea pool without webhook lists the jobs waiting on Gitea: one request per pool, the most a job waits for its VM to be ordered. */
export const DEFAULT_QUEUE_LIST_INTERVAL_MS = 5_000;

export interface PoolDemandOptions {
  readonly poolCache: Pick<Informer<ImpVMRunnerPool>, "list" | "get">;
  readonly forges: Pick<PoolForges, "forPool">;
  /** What each scale-set pool's listener last said. */
  readonly scaleSets?: ScaleSetViews | undefined;
  /** The pool should reconcile: demand or a runner of it changed. */
  readonly enqueue: (poolKey: string) => void;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly clock: Clock;
  /** Backstop listing of webhook pools. */
  readonly demandListIntervalMs?: number | undefined;
  /** Listing of `listing` pools (Gitea without webhook). */
  readonly queueListIntervalMs?: number | undefined;
}

export class PoolDemand {
  readonly #ledgers: Readonly<Record<ForgeFamily, RunnerActivity>>;
  readonly #webhook: WebhookDemand;
  readonly #listing: QueueListing;
  readonly #scaleSets: ScaleSetDemand;
  readonly #polled: DemandSource;
  readonly #none: DemandSource;

  constructor(o: PoolDemandOptions) {
    this.#ledgers = { github: new RunnerActivity(o.clock), gitea: new RunnerActivity(o.clock) };
    const ledger = (forge: ForgeFamily): RunnerActivity => this.#ledgers[forge];
    const tally = new DemandTally(o.registry, o.enqueue);
    this.#webhook = new WebhookDemand({ poolCache: o.poolCache, forges: o.forges, ledger, tally, enqueue: o.enqueue, logger: o.logger });
    this.#listing = new QueueListing({ poolCache: o.poolCache, forges: o.forges, ledger, tally, clock: o.clock, listingIntervalMs: o.queueListIntervalMs ?? DEFAULT_QUEUE_LIST_INTERVAL_MS, backstopIntervalMs: o.demandListIntervalMs ?? DEFAULT_DEMAND_LIST_INTERVAL_MS });
    this.#scaleSets = new ScaleSetDemand({ poolCache: o.poolCache, views: o.scaleSets, ledger: this.#ledgers.github, enqueue: o.enqueue });
    const listing = this.#listing;
    // Webhook and listing pools both count what they heard or listed in their forge's ledger.
    this.#polled = {
      observe: (ctx, pool, vms) => listing.observe(ctx, pool, vms),
      waiting: (pool) => ledger(forgeOf(pool)).queuedJobs(keyOf(pool)),
      nextLookInMs: (pool, now) => listing.nextLookInMs(pool, now),
      forget: (key) => listing.forget(key),
    };
    this.#none = { observe: async () => {}, waiting: () => 0, nextLookInMs: () => Infinity, forget: () => {} };
  }

  /** The pool's source of demand. */
  sourceOf(pool: Readonly<ImpVMRunnerPool>): DemandSource {
    switch (demandKindOf(pool)) {
      case "scale-set":
        return this.#scaleSets;
      case "webhook":
      case "listing":
        return this.#polled;
      case "none":
        return this.#none;
    }
  }

  observe(ctx: ReconcileContext, pool: StoredPool, vms: readonly StoredVm[]): Promise<void> {
    return this.sourceOf(pool).observe(ctx, pool, vms);
  }

  waiting(pool: StoredPool): number {
    return this.sourceOf(pool).waiting(pool);
  }

  nextLookInMs(pool: StoredPool, now: number): number {
    return this.sourceOf(pool).nextLookInMs(pool, now);
  }

  /** What is known of the runners of the pool's forge: busy, finished (and, in tests, queued jobs). */
  runners(pool: Readonly<ImpVMRunnerPool>): RunnerActivity {
    return this.#ledgers[forgeOf(pool)];
  }

  /** The ledger of one forge (tests, and the pool's runner list). */
  ledger(forge: ForgeFamily): RunnerActivity {
    return this.#ledgers[forge];
  }

  forget(poolKey: string): void {
    for (const ledger of Object.values(this.#ledgers)) ledger.forgetPool(poolKey);
    this.#listing.forget(poolKey);
  }

  /** A verified `workflow_job` delivery of `forge`. */
  onWorkflowJob(forge: ForgeFamily, event: WorkflowJobEvent, audience: DemandAudience = "all"): void {
    this.#webhook.onWorkflowJob(forge, event, audience);
  }

  /** A JobStarted or JobCompleted from a scale-set pool's listener. */
  onScaleSetJob(poolKey: string, job: JobMessage): void {
    this.#scaleSets.onJob(poolKey, job);
  }

  /** Resolves once every delivery received so far was verified and counted or dropped. */
  settled(): Promise<void> {
    return this.#webhook.settled();
  }
}
