/**
 * A pool's periodic listing of the jobs waiting on its forge: the demand of `listing` pools (Gitea
 * without webhook, every `listingIntervalMs`) and the backstop of `webhook` pools (every
 * `backstopIntervalMs`), so that no job waits for a lost delivery longer than one interval.
 *
 * What is listed: Gitea lists a pool's whole scope at once; GitHub lists per repository — the
 * pool's own (repository scope) or those it heard of within a day (organization scope, at most
 * 20); enterprise pools have no listing (docs/operator.md). A job counts in the first pool by name,
 * of its forge, that takes it, as a delivery does.
 */
import { keyOf, type Informer, type ReconcileContext } from "../../kube/index.ts";
import type { ImpVMRunnerPool } from "../../api/index.ts";
import type { QueuedJob } from "../../forge/index.ts";
import { describeError, type Clock } from "../../shared/index.ts";
import { forgeOf, listedRepositories, type ForgeFamily, type PoolForges } from "../forges/index.ts";
import { cachedPools, demandKindOf, firstPoolTaking, type StoredPool, type StoredVm } from "./demand-source.ts";
import type { DemandTally } from "./demand-tally.ts";
import type { RunnerActivity } from "./runner-activity.ts";

export interface QueueListingOptions {
  readonly poolCache: Pick<Informer<ImpVMRunnerPool>, "list">;
  readonly forges: Pick<PoolForges, "forPool">;
  readonly ledger: (forge: ForgeFamily) => RunnerActivity;
  readonly tally: DemandTally;
  readonly clock: Clock;
  readonly listingIntervalMs: number;
  readonly backstopIntervalMs: number;
}

const ms = (ts: string | undefined): number | undefined => (ts === undefined ? undefined : Date.parse(ts));

export class QueueListing {
  readonly #o: QueueListingOptions;
  /** When each pool last listed. */
  readonly #listedAt = new Map<string, number>();
  /** The ledger's sequence number when each pool last listed (RunnerActivity.sequence). */
  readonly #listedSeq = new Map<string, number>();

  constructor(options: QueueListingOptions) {
    this.#o = options;
  }

  /** How often the pool lists, or undefined if it does not. */
  intervalMs(pool: Readonly<ImpVMRunnerPool>): number | undefined {
    const kind = demandKindOf(pool);
    return kind === "listing" ? this.#o.listingIntervalMs : kind === "webhook" ? this.#o.backstopIntervalMs : undefined;
  }

  nextLookInMs(pool: StoredPool, now: number): number {
    const every = this.intervalMs(pool);
    const at = this.#listedAt.get(keyOf(pool));
    return every === undefined || at === undefined ? Infinity : Math.max(500, at + every - now);
  }

  forget(poolKey: string): void {
    this.#listedAt.delete(poolKey);
    this.#listedSeq.delete(poolKey);
  }

  async observe(ctx: ReconcileContext, pool: StoredPool, vms: readonly StoredVm[]): Promise<void> {
    const interval = this.intervalMs(pool);
    if (interval === undefined) return;
    const startedAt = this.#o.clock.now();
    const last = this.#listedAt.get(ctx.key);
    // Gitea says a job was taken only by no longer listing it (or by a delivery, which may be lost).
    // A VM that ended since the last listing may have run a job counted there: list again before
    // that demand can order a replacement for a job already done.
    const endedSince = forgeOf(pool) === "gitea" && last !== undefined && vms.some((vm) => (ms(vm.status?.phaseTimestamps?.succeeded) ?? ms(vm.status?.phaseTimestamps?.failed) ?? 0) > last);
    // A runner of the pool seen busy since the last listing, with no signal naming its job (a
    // runner list ran before the job's delivery, or instead of a lost one): it took one of the jobs
    // counted here, or another. List again before that job counts as waiting beside the busy runner.
    const ledger = this.#o.ledger(forgeOf(pool));
    const seenSeq = this.#listedSeq.get(ctx.key) ?? 0;
    const tookUnknownJob = last !== undefined && vms.some((vm) => (ledger.busyWithUnknownJobSince(vm.metadata.name) ?? -Infinity) > seenSeq);
    if (last !== undefined && startedAt - last < interval && !endedSince && !tookUnknownJob) return;
    this.#listedAt.set(ctx.key, startedAt);
    this.#listedSeq.set(ctx.key, ledger.sequence());
    const repositories = listedRepositories(pool, () => ledger.recentRepositories(ctx.key));
    try {
      const forge = await this.#o.forges.forPool(pool, ctx.signal);
      let listed: readonly QueuedJob[];
      let covered: readonly string[] | "whole-scope" = repositories;
      if (forge.listScopeQueuedJobs !== undefined) {
        listed = await forge.listScopeQueuedJobs(ctx.signal);
        covered = "whole-scope";
      } else if (forge.listQueuedJobs !== undefined && repositories.length > 0) listed = await forge.listQueuedJobs(repositories, ctx.signal);
      else return;
      const jobs = listed.filter((j) => this.#firstPoolFor(j, pool));
      for (const job of jobs) {
        if (ledger.isQueued(ctx.key, job.id)) continue;
        if (ledger.isSettled(job.id, ctx.key, job.runAttempt ?? 1)) {
          this.#o.tally.note("listing", "replayed");
          continue;
        }
        if (demandKindOf(pool) === "webhook") ctx.logger.info({ jobId: job.id, repository: job.repository }, "a queued job found by listing (its delivery was lost or is late)");
        this.#o.tally.count(ledger, ctx.key, "listing", job.id, job.repository, job.runAttempt ?? 1);
      }
      ledger.jobsListed(ctx.key, covered, jobs.map((j) => j.id), startedAt);
      ctx.logger.debug({ repositories, queued: jobs.map((j) => j.id) }, "listed the jobs waiting on the forge");
    } catch (err) {
      ctx.logger.warn({ err: describeError(err) }, "cannot list the jobs waiting on the forge");
    }
  }

  /** Whether `pool` is the first listing pool by name, of the same forge, that takes the job. */
  #firstPoolFor(job: QueuedJob, pool: StoredPool): boolean {
    const [owner = "", name = ""] = job.repository.split("/");
    const asDelivered = { labels: job.labels, repository: { owner, name, fullName: job.repository }, organization: owner, enterprise: undefined };
    const first = firstPoolTaking(cachedPools(this.#o.poolCache), forgeOf(pool), asDelivered, (p) => this.intervalMs(p) !== undefined);
    return first !== undefined && keyOf(first) === keyOf(pool);
  }
}
