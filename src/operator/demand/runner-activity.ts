/**
 * What the operator knows about the forge's side of its pools, in memory: jobs waiting for a runner
 * (from `workflow_job` queued webhooks and from periodic listings of queued jobs) and which runners
 * are busy (from in_progress/completed webhooks, confirmed by periodic runner lists). Webhooks are
 * fast but may be lost, duplicated or replayed; listings are slow but complete, so a listing replaces
 * what it covers unless a webhook about the same job or runner arrived after it was started. Queued
 * jobs expire after `queuedTtlMs`, so a lost in_progress webhook cannot hold burst capacity for ever.
 * Jobs seen taken or completed are remembered (bounded) as settled, with the run attempt they were
 * seen in: a later `queued` for that attempt or an earlier one is a replay and never counts again; a
 * later attempt is a re-run and counts, even on a forge that re-ran a job under the same id (GitHub
 * and Gitea 1.27.3 give a re-run a new id — measured for Gitea in test/e2e/gitea.test.ts — so there
 * the attempt only guards; a forge that kept the id would otherwise stall a re-run for a day).
 */
import type { Clock } from "../../shared/index.ts";

export const DEFAULT_QUEUED_JOB_TTL_MS = 10 * 60_000;
/** How long a job seen taken or completed stays known as settled, and how many are kept at most. */
export const SETTLED_JOB_TTL_MS = 24 * 60 * 60_000;
export const MAX_SETTLED_JOBS = 100_000;
/** Repositories a pool heard of recently (org scope: where its listings look), how long and how many. */
export const RECENT_REPOSITORY_TTL_MS = 24 * 60 * 60_000;
export const MAX_RECENT_REPOSITORIES = 20;

interface BusyEntry {
  readonly busy: boolean;
  readonly at: number;
  /**
   * Busy with a job no signal named (a runner list, a refused removal): the ledger's sequence number
   * when that was first seen (a counter, not a clock: two things in one millisecond still order).
   * Until the pool lists its queued jobs again it cannot tell which job went, and counting both the
   * busy runner and the job it took would order a second VM for one job.
   */
  readonly unknownJobSince?: number;
}

interface QueuedEntry {
  readonly expires: number;
  readonly repository: string | undefined;
  /** When this demand was last confirmed (webhook or listing). */
  readonly at: number;
  /** The run attempt it waits in: a late word about an earlier attempt does not end it. */
  readonly attempt: number;
}

export class RunnerActivity {
  readonly #clock: Clock;
  readonly #queuedTtlMs: number;
  /** pool key → job id → its demand record. */
  readonly #queued = new Map<string, Map<number, QueuedEntry>>();
  /**
   * job id → when it was seen taken or completed, and for which pools: every pool when a signal
   * trusted for all said so (the App's webhook secret), else only the pools whose own secret did
   * (a pool's secret must not make other pools ignore a job). Insertion order is time order.
   */
  readonly #settled = new Map<number, { readonly at: number; readonly attempt: number; readonly pools: ReadonlySet<string> | "all" }>();
  /** pool key → repository → when a job of it was last heard of. */
  readonly #repositories = new Map<string, Map<string, number>>();
  /** runner name → last known busy flag. */
  readonly #busy = new Map<string, BusyEntry>();
  /** Runners whose one job completed. */
  readonly #finished = new Set<string>();
  /** Counts what is recorded about runners; see BusyEntry.unknownJobSince. */
  #seq = 0;

  constructor(clock: Clock, queuedTtlMs = DEFAULT_QUEUED_JOB_TTL_MS) {
    this.#clock = clock;
    this.#queuedTtlMs = queuedTtlMs;
  }

  /** A job waits for a runner of this pool. A settled job never counts again in that attempt (a replayed delivery); returns whether it counted. */
  jobQueued(poolKey: string, jobId: number, repository?: string, attempt = 1): boolean {
    if (this.isSettled(jobId, poolKey, attempt)) return false;
    let jobs = this.#queued.get(poolKey);
    if (jobs === undefined) {
      jobs = new Map();
      this.#queued.set(poolKey, jobs);
    }
    const now = this.#clock.now();
    jobs.set(jobId, { expires: now + this.#queuedTtlMs, repository, at: now, attempt });
    if (repository !== undefined) this.repositoryHeard(poolKey, repository);
    return true;
  }

  /** A job of `repository` concerned this pool (any action): its listings look there (org scope). */
  repositoryHeard(poolKey: string, repository: string): void {
    let repos = this.#repositories.get(poolKey);
    if (repos === undefined) this.#repositories.set(poolKey, (repos = new Map()));
    repos.delete(repository);
    repos.set(repository, this.#clock.now());
    while (repos.size > MAX_RECENT_REPOSITORIES) repos.delete(repos.keys().next().value ?? "");
  }

  /** The repositories heard of within RECENT_REPOSITORY_TTL_MS, most recent last. */
  recentRepositories(poolKey: string): string[] {
    const repos = this.#repositories.get(poolKey);
    if (repos === undefined) return [];
    const since = this.#clock.now() - RECENT_REPOSITORY_TTL_MS;
    for (const [repo, at] of repos) if (at < since) repos.delete(repo);
    return [...repos.keys()];
  }

  /**
   * A complete listing of the jobs waiting in `repositories`, requested at `startedAt`: the listed
   * jobs are demand (unless settled); demand recorded for those repositories before the listing
   * started and not listed is no longer (taken or cancelled, its webhook lost). Demand recorded
   * after the listing started stays: the listing may predate it.
   */
  jobsListed(poolKey: string, repositories: readonly string[] | "whole-scope", jobIds: readonly number[], startedAt: number): void {
    const listed = new Set(jobIds);
    const covered = repositories === "whole-scope" ? undefined : new Set(repositories);
    const jobs = this.#queued.get(poolKey);
    for (const [id, entry] of jobs ?? []) {
      // A job no longer listed was taken (or cancelled): a listing of the whole scope covers every job it counted.
      const inListing = covered === undefined || (entry.repository !== undefined && covered.has(entry.repository));
      if (!listed.has(id) && inListing && entry.at <= startedAt) jobs?.delete(id);
    }
  }

  /** Whether the pool counts the job as waiting now. */
  isQueued(poolKey: string, jobId: number): boolean {
    const entry = this.#queued.get(poolKey)?.get(jobId);
    return entry !== undefined && entry.expires > this.#clock.now();
  }

  /** Whether the job was seen taken or completed in this run attempt or a later one (within SETTLED_JOB_TTL_MS), by a signal trusted for this pool. */
  isSettled(jobId: number, poolKey: string, attempt = 1): boolean {
    const entry = this.#settled.get(jobId);
    return entry !== undefined && entry.attempt >= attempt && this.#clock.now() - entry.at < SETTLED_JOB_TTL_MS && (entry.pools === "all" || entry.pools.has(poolKey));
  }

  #settle(jobId: number, pools: ReadonlySet<string> | "all", attempt: number): void {
    const now = this.#clock.now();
    const old = this.#settled.get(jobId);
    // A late word about an earlier attempt changes nothing about the later one already settled.
    if (old !== undefined && attempt < old.attempt) return;
    // A later attempt starts over: the pools that vouched for an earlier one say nothing about it.
    const known = old === undefined || old.attempt < attempt ? undefined : old.pools;
    this.#settled.delete(jobId);
    const merged = pools === "all" || known === "all" ? "all" : new Set([...(known ?? []), ...pools]);
    this.#settled.set(jobId, { at: now, attempt: Math.max(attempt, old?.attempt ?? 0), pools: merged });
    for (const [id, entry] of this.#settled) {
      if (this.#settled.size <= MAX_SETTLED_JOBS && now - entry.at < SETTLED_JOB_TTL_MS) break;
      this.#settled.delete(id);
    }
  }

  /**
   * A job was taken (by any runner, ours or not) or ended (also cancelled while queued): no pool
   * waits for it any more. `inPool`: only the pools it answers true for (a pool's own webhook
   * secret). Returns the pools that were waiting for it.
   */
  jobTaken(jobId: number, audience: ReadonlySet<string> | "all" = "all", attempt = 1): string[] {
    this.#settle(jobId, audience, attempt);
    const waited: string[] = [];
    for (const [poolKey, jobs] of this.#queued) {
      if (audience !== "all" && !audience.has(poolKey)) continue;
      const entry = jobs.get(jobId);
      // A late word about an earlier attempt does not end the demand of a re-run.
      if (entry !== undefined && entry.attempt <= attempt && jobs.delete(jobId)) waited.push(poolKey);
    }
    return waited;
  }

  queuedJobs(poolKey: string): number {
    const jobs = this.#queued.get(poolKey);
    if (jobs === undefined) return 0;
    const now = this.#clock.now();
    for (const [id, entry] of jobs) if (entry.expires <= now) jobs.delete(id);
    return jobs.size;
  }

  /** `jobKnown`: the signal named the job it took (a webhook, JobStarted), which the caller settled. */
  runnerBusy(runnerName: string, busy: boolean, jobKnown = true): void {
    this.#record(runnerName, busy, this.#clock.now(), !jobKnown);
  }

  /** Records a runner's busy flag; `jobUnknown`: no signal named the job it is busy with (see BusyEntry.unknownJobSince). */
  #record(runnerName: string, busy: boolean, at: number, jobUnknown: boolean): void {
    const known = this.#busy.get(runnerName);
    // Still busy with the same job: it keeps when (and whether) it was first seen unknown.
    const unknownJobSince = busy && jobUnknown ? (known?.busy === true ? known.unknownJobSince : ++this.#seq) : undefined;
    this.#busy.set(runnerName, { busy, at, ...(unknownJobSince === undefined ? {} : { unknownJobSince }) });
  }

  /**
   * A complete list of runners, requested at `startedAt`: it wins over anything older. The forge's
   * busy flag must be authoritative (GitHub's is; Gitea's is not, so GiteaForge derives it from the
   * jobs in progress): a runner listed idle is scaled down first.
   */
  runnersListed(runners: ReadonlyArray<{ readonly name: string; readonly busy: boolean }>, startedAt: number): void {
    for (const r of runners) {
      const known = this.#busy.get(r.name);
      if (known !== undefined && known.at > startedAt) continue;
      // A list names no job: busy here is a job taken that only a listing of queued jobs can tell.
      // A finished runner's job is known (it completed): a list that still shows it busy says nothing new.
      this.#record(r.name, r.busy, startedAt, !this.#finished.has(r.name));
    }
  }

  isBusy(runnerName: string): boolean {
    return this.#busy.get(runnerName)?.busy === true;
  }

  /** The ledger's sequence number now: what a listing starting now has seen. */
  sequence(): number {
    return this.#seq;
  }

  /** The sequence number at which the runner was first seen busy with a job no signal named (undefined: not busy, or its job is known). */
  busyWithUnknownJobSince(runnerName: string): number | undefined {
    const entry = this.#busy.get(runnerName);
    return entry?.busy === true ? entry.unknownJobSince : undefined;
  }

  /** Its job completed: a JIT runner takes no other, so it stays finished whatever a list says later. */
  runnerFinished(runnerName: string): void {
    this.#busy.set(runnerName, { busy: false, at: this.#clock.now() });
    this.#finished.add(runnerName);
  }

  isFinished(runnerName: string): boolean {
    return this.#finished.has(runnerName);
  }

  /** Drops what is known about runners that no longer have a VM. */
  forgetRunnersExcept(names: ReadonlySet<string>, prefix: string): void {
    for (const name of this.#busy.keys()) if (name.startsWith(prefix) && !names.has(name)) this.#busy.delete(name);
    for (const name of this.#finished) if (name.startsWith(prefix) && !names.has(name)) this.#finished.delete(name);
  }

  forgetPool(poolKey: string): void {
    this.#queued.delete(poolKey);
    this.#repositories.delete(poolKey);
  }
}
