/**
 * `workflow_job` deliveries (GitHub's, or Gitea's since 1.24) as demand and runner activity. A
 * `queued` delivery counts in one pool — the first by name of the delivery's forge, with a webhook,
 * that takes the job — and only once the forge says the job still waits; `in_progress` marks a
 * runner busy, `completed` finished; a job completed without a runner (cancelled while queued) is
 * no longer demand.
 *
 * Demand is verified before it costs a VM, whatever the operator remembers: a delivery for a job
 * seen taken or completed is a replay and never counts (no call to the forge); any other counts
 * only once the forge says the job still waits. A delivery's id is not signed, and the memory of
 * jobs seen is gone after a restart, so a validly signed body replayed under a new id must meet the
 * forge's own answer, however recent the job. A dropped delivery is found by the next listing.
 *
 * `audience`: the pools the delivery's secret is trusted for (a pool's own secretRef), or all.
 */
import { keyOf, type Informer } from "../../kube/index.ts";
import type { ImpVMRunnerPool } from "../../api/index.ts";
import type { WorkflowJobEvent } from "../../forge/index.ts";
import { describeError, type Logger } from "../../shared/index.ts";
import { forgeOf, poolTakesJob, type ForgeFamily, type PoolForges } from "../forges/index.ts";
import { cachedPools, demandKindOf, firstPoolTaking, type StoredPool } from "./demand-source.ts";
import type { DemandTally } from "./demand-tally.ts";
import type { RunnerActivity } from "./runner-activity.ts";
import { isPoolRunner } from "./runner-names.ts";

export type DemandAudience = ReadonlySet<string> | "all";

export interface WebhookDemandOptions {
  readonly poolCache: Pick<Informer<ImpVMRunnerPool>, "list">;
  readonly forges: Pick<PoolForges, "forPool">;
  readonly ledger: (forge: ForgeFamily) => RunnerActivity;
  readonly tally: DemandTally;
  readonly enqueue: (poolKey: string) => void;
  readonly logger: Logger;
}

export class WebhookDemand {
  readonly #o: WebhookDemandOptions;
  /** Verifications of queued deliveries still asking the forge. */
  readonly #verifying = new Set<Promise<void>>();

  constructor(options: WebhookDemandOptions) {
    this.#o = options;
  }

  onWorkflowJob(forge: ForgeFamily, event: WorkflowJobEvent, audience: DemandAudience): void {
    const ledger = this.#o.ledger(forge);
    const pools = cachedPools(this.#o.poolCache).filter((p) => forgeOf(p) === forge && (audience === "all" || audience.has(keyOf(p))));
    if (event.action === "queued") {
      // One pool per job, the first by name: counting a job in several pools would over-create. A
      // pool of the same forge that lists instead (no webhook) and comes first counts it from its
      // listing, as the listings' own rule says: then no webhook pool does.
      const heard = new Set(pools.map((p) => keyOf(p)));
      const first = firstPoolTaking(cachedPools(this.#o.poolCache), forge, event, (p) => demandKindOf(p) === "listing" || (demandKindOf(p) === "webhook" && heard.has(keyOf(p))));
      if (first !== undefined && demandKindOf(first) === "webhook") this.#queued(ledger, first, event);
      return;
    }
    for (const p of pools) if (poolTakesJob(p, event)) ledger.repositoryHeard(keyOf(p), event.repository.fullName);
    const runner = event.runnerName;
    if (runner === null) {
      // Completed without a runner: cancelled while queued. No pool waits for it any more; a
      // pool's own secret can end only that pool's demand.
      for (const poolKey of ledger.jobTaken(event.jobId, audience, event.runAttempt)) this.#o.enqueue(poolKey);
      return;
    }
    const owners = pools.filter((p) => isPoolRunner(p.metadata.name, runner));
    // A pool's own secret speaks only about that pool's runners.
    if (audience !== "all" && owners.length === 0) return;
    ledger.jobTaken(event.jobId, audience, event.runAttempt);
    if (event.action === "completed") ledger.runnerFinished(runner);
    else ledger.runnerBusy(runner, true);
    for (const pool of owners) this.#o.enqueue(keyOf(pool));
  }

  /** Resolves once every delivery received so far was verified and counted or dropped (tests wait on it). */
  async settled(): Promise<void> {
    while (this.#verifying.size > 0) await Promise.all([...this.#verifying]);
  }

  #queued(ledger: RunnerActivity, pool: StoredPool, event: WorkflowJobEvent): void {
    const key = keyOf(pool);
    if (ledger.isSettled(event.jobId, key, event.runAttempt)) {
      this.#o.tally.note("webhook", "replayed");
      this.#o.logger.warn({ pool: key, jobId: event.jobId, deliveryId: event.deliveryId }, "a queued delivery for a job already taken or completed: a replay; not counted");
      return;
    }
    const check = this.#verifyThenCount(ledger, pool, event).finally(() => this.#verifying.delete(check));
    this.#verifying.add(check);
  }

  async #verifyThenCount(ledger: RunnerActivity, pool: StoredPool, event: WorkflowJobEvent): Promise<void> {
    const key = keyOf(pool);
    try {
      const forge = await this.#o.forges.forPool(pool);
      const state = (await forge.jobState?.(event.repository.fullName, event.jobId)) ?? "unknown";
      if (state === "queued") {
        this.#o.logger.info({ pool: key, jobId: event.jobId, deliveryId: event.deliveryId }, "a queued delivery verified: the forge says the job waits");
        this.#o.tally.count(ledger, key, "webhook", event.jobId, event.repository.fullName, event.runAttempt);
        return;
      }
      this.#o.tally.note("webhook", "stale");
      this.#o.logger.info({ pool: key, jobId: event.jobId, deliveryId: event.deliveryId, state }, "a queued delivery for a job that no longer waits (the forge says so); not counted");
    } catch (err) {
      // Not counted: the next listing finds the job if it really waits.
      this.#o.tally.note("webhook", "unverified");
      this.#o.logger.warn({ pool: key, jobId: event.jobId, err: describeError(err) }, "cannot verify a queued delivery with the forge; the next listing decides");
    }
  }
}
