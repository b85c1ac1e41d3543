/**
 * What the operator knows about GitHub's side of its pools, in memory: jobs waiting for a runner
 * (from `workflow_job` queued webhooks) and which runners are busy (from in_progress/completed
 * webhooks, confirmed by periodic runner lists). Webhooks are fast but may be lost or duplicated;
 * the list is slow but complete, so a list replaces what it covers unless a webhook about the same
 * runner arrived after the list was started. Queued jobs expire after `queuedTtlMs`, so a lost
 * in_progress webhook cannot hold burst capacity for ever.
 */
import type { Clock } from "../../shared/index.ts";

export const DEFAULT_QUEUED_JOB_TTL_MS = 10 * 60_000;

interface BusyEntry {
  readonly busy: boolean;
  readonly at: number;
}

export class RunnerActivity {
  readonly #clock: Clock;
  readonly #queuedTtlMs: number;
  /** pool key → job id → expiry. */
  readonly #queued = new Map<string, Map<number, number>>();
  /** runner name → last known busy flag. */
  readonly #busy = new Map<string, BusyEntry>();
  /** Runners whose one job completed. */
  readonly #finished = new Set<string>();

  constructor(clock: Clock, queuedTtlMs = DEFAULT_QUEUED_JOB_TTL_MS) {
    this.#clock = clock;
    this.#queuedTtlMs = queuedTtlMs;
  }

  jobQueued(poolKey: string, jobId: number): void {
    let jobs = this.#queued.get(poolKey);
    if (jobs === undefined) {
      jobs = new Map();
      this.#queued.set(poolKey, jobs);
    }
    jobs.set(jobId, this.#clock.now() + this.#queuedTtlMs);
  }

  /**
   * A job was taken (by any runner, ours or not) or ended (also cancelled while queued): no pool
   * waits for it any more. `inPool`: only the pools it answers true for (a pool's own webhook
   * secret). Returns the pools that were waiting for it.
   */
  jobTaken(jobId: number, inPool: (poolKey: string) => boolean = () => true): string[] {
    const waited: string[] = [];
    for (const [poolKey, jobs] of this.#queued) if (inPool(poolKey) && jobs.delete(jobId)) waited.push(poolKey);
    return waited;
  }

  queuedJobs(poolKey: string): number {
    const jobs = this.#queued.get(poolKey);
    if (jobs === undefined) return 0;
    const now = this.#clock.now();
    for (const [id, expires] of jobs) if (expires <= now) jobs.delete(id);
    return jobs.size;
  }

  runnerBusy(runnerName: string, busy: boolean): void {
    this.#busy.set(runnerName, { busy, at: this.#clock.now() });
  }

  /** A complete list of runners, requested at `startedAt`: it wins over anything older. */
  runnersListed(runners: ReadonlyArray<{ readonly name: string; readonly busy: boolean }>, startedAt: number): void {
    for (const r of runners) {
      const known = this.#busy.get(r.name);
      if (known === undefined || known.at <= startedAt) this.#busy.set(r.name, { busy: r.busy, at: startedAt });
    }
  }

  isBusy(runnerName: string): boolean {
    return this.#busy.get(runnerName)?.busy === true;
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
  }
}
