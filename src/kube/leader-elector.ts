import { describeError, silentLogger, systemClock, terminalError, type Clock, type Logger } from "../shared/index.ts";
import { isAlreadyExists, isConflict, isNotFound } from "./api-errors.ts";
import { decideLease, microTime, observeLease, type Lease, type LeaseObservation } from "./lease-decision.ts";
import type { ResourceClient } from "./resource-client.ts";

export interface LeaderElectionTimings {
  /** How long others wait, from their own last observation of a change, before taking over. */
  readonly leaseDurationMs: number;
  /** A leader that has not renewed for this long stops leading. Must be below leaseDurationMs. */
  readonly renewDeadlineMs: number;
  /** Pause between acquire or renew attempts. */
  readonly retryPeriodMs: number;
}

/**
 * Imp wants a dead leader replaced in under 15 s. A candidate's polls are up to 1.2 × retryPeriod
 * (+ one API round trip) apart, so it may see the leader's last renewal up to one poll late, and
 * takes over at the first poll a full leaseDuration after that: worst case
 * leaseDuration + 2 × 1.2 × retryPeriod + API latency = 10 + 3.6 s + latency here. client-go's
 * 15/10/2 s would give up to 19.8 s with this jitter, and the 12/8/2 s we shipped first 16.8 s.
 * Safety: a leader that cannot renew stops within renewDeadline + 1.2 × retryPeriod = 7.8 s of its
 * last renewal, 2.2 s before anyone may take over.
 */
export const DEFAULT_LEADER_ELECTION: LeaderElectionTimings = { leaseDurationMs: 10_000, renewDeadlineMs: 6_000, retryPeriodMs: 1_500 };

export interface LeaderElectorOptions extends Partial<LeaderElectionTimings> {
  readonly client: Pick<ResourceClient<Lease>, "get" | "create" | "patch">;
  readonly namespace: string;
  readonly name: string;
  /** Unique per process: pod name plus a random suffix. */
  readonly identity: string;
  /**
   * Called once leadership is won. Leader-only work runs until `signal` aborts; the returned
   * promise must settle once that work has stopped: the lease is not released before.
   */
  readonly onStartedLeading: (signal: AbortSignal) => Promise<void> | void;
  /** Called after leading ends, for whatever reason, once the leader's work has stopped. */
  readonly onStoppedLeading?: (reason: "stopped" | "lost") => void;
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly random?: () => number;
}

/**
 * Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: optimistic writes
 * with a resourceVersion precondition; takeover only after a lease duration without change as seen
 * by this process. A leader that cannot renew within renewDeadline stops leading (its work is
 * aborted) before anyone else may take over, because renewDeadline < leaseDuration.
 * `start(signal)` campaigns, leads, and resolves after leading ended: on abort (the lease is then
 * released so a successor need not wait) or on loss (no release; the caller decides, typically
 * exiting the process as controller-runtime does).
 */
export class LeaderElector {
  readonly #options: LeaderElectorOptions;
  readonly #timings: LeaderElectionTimings;
  readonly #clock: Clock;
  readonly #logger: Logger;
  #observed: LeaseObservation | undefined;
  #leading = false;
  #started = false;

  constructor(options: LeaderElectorOptions) {
    this.#options = options;
    this.#timings = {
      leaseDurationMs: options.leaseDurationMs ?? DEFAULT_LEADER_ELECTION.leaseDurationMs,
      renewDeadlineMs: options.renewDeadlineMs ?? DEFAULT_LEADER_ELECTION.renewDeadlineMs,
      retryPeriodMs: options.retryPeriodMs ?? DEFAULT_LEADER_ELECTION.retryPeriodMs,
    };
    const t = this.#timings;
    if (!(t.leaseDurationMs > t.renewDeadlineMs && t.renewDeadlineMs > t.retryPeriodMs && t.retryPeriodMs > 0)) {
      throw terminalError(
        "InvalidLeaderElection",
        `Cannot configure leader election: need leaseDuration > renewDeadline > retryPeriod > 0, got ${t.leaseDurationMs}/${t.renewDeadlineMs}/${t.retryPeriodMs} ms`,
      );
    }
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ lease: `${options.namespace}/${options.name}`, identity: options.identity });
  }

  isLeader(): boolean {
    return this.#leading;
  }

  /** Who holds the lease as last read, if anyone. */
  observedHolder(): string | undefined {
    const holder = this.#observed?.spec.holderIdentity;
    return holder === null || holder === "" ? undefined : holder;
  }

  async start(signal: AbortSignal): Promise<void> {
    if (this.#started) throw new Error("Cannot start leader election: already started");
    this.#started = true;
    if (!(await this.#campaign(signal))) return;

    this.#leading = true;
    const leaderWork = new AbortController();
    this.#logger.info("started leading");
    const work = Promise.resolve()
      .then(() => this.#options.onStartedLeading(leaderWork.signal))
      .catch((err: unknown) => this.#logger.error({ err: describeError(err) }, "leader work failed"));

    const reason = await this.#lead(signal);
    this.#leading = false;
    leaderWork.abort();
    await work;
    if (reason === "stopped") await this.#release();
    this.#logger.info({ reason }, "stopped leading");
    this.#options.onStoppedLeading?.(reason);
  }

  /** Tries every retryPeriod until this process holds the lease; false if aborted first. */
  async #campaign(signal: AbortSignal): Promise<boolean> {
    while (!signal.aborted) {
      if (await this.#tryAcquireOrRenew(signal, this.#timings.renewDeadlineMs)) return true;
      if (!(await this.#pause(signal))) return false;
    }
    return false;
  }

  /** Renews every retryPeriod; returns why leading ended. */
  async #lead(signal: AbortSignal): Promise<"stopped" | "lost"> {
    let lastRenew = this.#clock.now();
    for (;;) {
      if (!(await this.#pause(signal))) return "stopped";
      const budget = lastRenew + this.#timings.renewDeadlineMs - this.#clock.now();
      if (budget > 0 && (await this.#tryAcquireOrRenew(signal, budget))) {
        lastRenew = this.#clock.now();
        continue;
      }
      if (signal.aborted) return "stopped";
      const holder = this.observedHolder();
      if (holder !== undefined && holder !== this.#options.identity) {
        this.#logger.warn({ holder }, "another process holds the lease");
        return "lost";
      }
      if (this.#clock.now() - lastRenew >= this.#timings.renewDeadlineMs) {
        this.#logger.warn({ lastRenewAgoMs: this.#clock.now() - lastRenew }, "could not renew within the renew deadline");
        return "lost";
      }
    }
  }

  /** One acquire-or-renew round. Never throws: failures are logged and mean "not leader now". */
  async #tryAcquireOrRenew(signal: AbortSignal, deadlineMs: number): Promise<boolean> {
    const callSignal = AbortSignal.any([signal, AbortSignal.timeout(Math.max(1, deadlineMs))]);
    const ref = { namespace: this.#options.namespace, name: this.#options.name };
    try {
      let lease: Lease | undefined;
      try {
        lease = await this.#options.client.get(ref, callSignal);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      const now = this.#clock.now();
      this.#observed = lease === undefined ? undefined : observeLease(this.#observed, { lease, now });
      const action = decideLease({ observed: this.#observed, identity: this.#options.identity, now, leaseDurationMs: this.#timings.leaseDurationMs });
      if (action.kind === "wait") return false;
      const written =
        action.kind === "create"
          ? await this.#options.client.create({ metadata: { namespace: ref.namespace, name: ref.name }, spec: action.spec }, callSignal)
          : await this.#options.client.patch(ref, { metadata: { resourceVersion: action.resourceVersion }, spec: action.spec }, callSignal);
      this.#observed = observeLease(this.#observed, { lease: written, now: this.#clock.now() });
      if (action.kind !== "renew") this.#logger.info({ transition: action.kind, leaseTransitions: action.spec.leaseTransitions }, "acquired lease");
      return true;
    } catch (err) {
      if (isConflict(err) || isAlreadyExists(err)) {
        this.#logger.debug({ err: describeError(err) }, "lost a lease write race");
      } else if (!signal.aborted) {
        this.#logger.warn({ err: describeError(err) }, "lease acquire/renew failed");
      }
      return false;
    }
  }

  /** Gives the lease up so a successor need not wait out the lease duration. Best effort. */
  async #release(): Promise<void> {
    const observed = this.#observed;
    if (observed === undefined || observed.spec.holderIdentity !== this.#options.identity) return;
    try {
      await this.#options.client.patch(
        { namespace: this.#options.namespace, name: this.#options.name },
        {
          metadata: { resourceVersion: observed.resourceVersion },
          spec: { holderIdentity: null, leaseDurationSeconds: 1, renewTime: microTime(this.#clock.now()) },
        },
        AbortSignal.timeout(this.#timings.retryPeriodMs),
      );
      this.#logger.info("released lease");
    } catch (err) {
      this.#logger.warn({ err: describeError(err) }, "could not release lease; successors wait for it to expire");
    }
  }

  /** Sleeps a jittered retryPeriod (up to +20 %); false if aborted. */
  async #pause(signal: AbortSignal): Promise<boolean> {
    const jitter = 1 + 0.2 * (this.#options.random ?? Math.random)();
    try {
      await this.#clock.sleep(Math.round(this.#timings.retryPeriodMs * jitter), signal);
      return true;
    } catch {
      return false;
    }
  }
}
