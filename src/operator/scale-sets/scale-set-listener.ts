/**
 * One runner pool's scale-set listener: resolve (find or create) the scale set, open its message
 * session, long-poll the queue and act on each message, as the transition table
 * (listener-table.ts) says. A message is acted on completely — jobs acquired, runners marked busy or
 * finished, demand taken from its statistics — and only then acknowledged, so a crash anywhere
 * before the ack means the message comes again (at least once); every handler is idempotent.
 * Demand is never counted from messages: it is the latest `statistics.totalAssignedJobs`, which
 * every message, and every new session, carries.
 *
 * Capacity-honest: each poll tells the service (X-ScaleSetMaxCapacity, actions/scaleset's
 * SetMaxRunners) how many jobs the pool can hold now — its placed VMs plus the room the cluster has for
 * more, at most maxConcurrent — so the service offers no job the cluster cannot place; the rest stay
 * GitHub's to give to a scale set that can run them, and wait there, counted (totalAvailableJobs).
 * A long poll sent a capacity that may since have changed (a VM ended, a node joined or was
 * cordoned, another pool took the room): `nudge()` ends it early so the next poll says the new one
 * at once, instead of up to 50 s later — room that appeared serves a waiting job now, and room that
 * went is not offered.
 */
import { ScaleSetErrorCode, type JobMessage, type RunnerScaleSet, type ScaleSetClient, type ScaleSetMessage, type ScaleSetSession, type ScaleSetStatistics } from "../../forge/index.ts";
import { describeError, ImpError, NO_FAULTS, systemClock, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import { decideListener, DEFAULT_LISTENER_TIMINGS, START, type ListenerOutcome, type ListenerPhase, type ListenerStep, type ListenerTimings, type ListeningReason } from "./listener-table.ts";

/** The client calls a listener makes (ScaleSetClient has them all). */
export type ListenerClient = Pick<
  ScaleSetClient,
  "runnerGroupId" | "findScaleSet" | "createScaleSet" | "createSession" | "refreshSession" | "deleteSession" | "getMessage" | "deleteMessage" | "acquireJobs"
>;

export interface ListenerSpec {
  readonly poolKey: string;
  readonly scaleSetName: string;
  readonly runnerGroup: string;
  /** Labels besides the name (the scale set carries its name first, as ARC does). */
  readonly labels: readonly string[];
  /** Told to the service with every poll (X-ScaleSetMaxCapacity): the pool's maxConcurrent. */
  readonly maxCapacity: number;
  /** The session the pool's status records, if any: a crashed leader's, closed before a new one is opened. */
  readonly recordedSessionId: string | undefined;
}

/** What the listener tells the rest of the operator. Every call may repeat (redelivery): all must be idempotent. */
export interface ListenerSink {
  statistics(poolKey: string, statistics: ScaleSetStatistics): void;
  job(poolKey: string, job: JobMessage): void;
  state(poolKey: string, state: ListenerState): void;
  /** The capacity a poll is about to tell the service. */
  capacity?(poolKey: string, capacity: number): void;
  event(poolKey: string, type: "Normal" | "Warning", reason: string, message: string): void;
}

export interface ListenerState {
  readonly phase: ListenerPhase;
  readonly reason: ListeningReason;
  readonly message: string;
  readonly scaleSetId: number | undefined;
  readonly sessionId: string | undefined;
}

export interface ScaleSetListenerOptions {
  readonly spec: ListenerSpec;
  readonly client: (signal: AbortSignal) => Promise<ListenerClient>;
  readonly sink: ListenerSink;
  /** The session's ownerName (the operator's identity), as GitHub shows it. */
  readonly ownerName: string;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly timings?: ListenerTimings;
  /** Fault points listener.before-ack and listener.after-ack (docs/failure-proof-points.md). */
  readonly faults?: FaultPoints;
  /** How many jobs the pool can hold now (its placed VMs plus the cluster's room); default spec.maxCapacity. Capped by spec.maxCapacity. */
  readonly capacity?: () => number | undefined;
}

const CLOSE_TIMEOUT_MS = 5_000;
/** A poll ended early for a new capacity is at least this old: about one poll a second per listener, at most. */
const MIN_REPOLL_MS = 1_000;

export class ScaleSetListener {
  readonly #o: ScaleSetListenerOptions;
  readonly #clock: Clock;
  readonly #timings: ListenerTimings;
  #scaleSet: RunnerScaleSet | undefined;
  #session: ScaleSetSession | undefined;
  #lastMessageId = 0;
  #recordedSessionId: string | undefined;
  /** The capacity the poll in flight told the service, when it began, and the way to end it early. */
  #inFlight: { readonly capacity: number; readonly startedAt: number; readonly abort: AbortController } | undefined;
  /** A nudge that came too soon after its poll began, due when that poll may be ended. */
  #nudgeLater: ReturnType<typeof setTimeout> | undefined;

  constructor(options: ScaleSetListenerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#timings = options.timings ?? DEFAULT_LISTENER_TIMINGS;
    this.#recordedSessionId = options.spec.recordedSessionId;
  }

  /** Runs until `signal` aborts, then closes its session (best effort) so the next listener need not wait for it to expire. */
  async run(signal: AbortSignal): Promise<void> {
    const { poolKey } = this.#o.spec;
    let step: ListenerStep = START;
    this.#report(step, "Connecting to the Actions service");
    try {
      while (!signal.aborted) {
        let outcome: ListenerOutcome = "ok";
        let problem = "";
        try {
          await this.#act(step.phase, signal);
        } catch (err) {
          if (signal.aborted) break;
          outcome = outcomeOf(err);
          problem = describeError(err).slice(0, 500);
          this.#o.logger.warn({ pool: poolKey, phase: step.phase, outcome, err: problem }, "scale-set listener step failed");
        }
        const d = decideListener(step, outcome, this.#timings);
        if (d.next.reason !== step.reason || problem !== "") this.#report(d.next, problem === "" ? describeReason(d.next.reason, this.#o.spec.scaleSetName) : problem);
        if (d.warn) this.#o.sink.event(poolKey, "Warning", d.next.reason, `${describeReason(d.next.reason, this.#o.spec.scaleSetName)}${problem === "" ? "" : `: ${problem}`}`);
        step = d.next;
        if (d.waitMs > 0) await this.#clock.sleep(d.waitMs, signal).catch(() => undefined);
      }
    } finally {
      await this.#close();
    }
  }

  async #act(phase: ListenerPhase, signal: AbortSignal): Promise<void> {
    const client = await this.#o.client(signal);
    switch (phase) {
      case "Resolving":
        return this.#resolve(client, signal);
      case "Opening":
        return this.#open(client, signal);
      case "Polling":
        return this.#poll(client, signal);
      case "Refreshing":
        this.#session = await client.refreshSession(this.#requireSession(), signal);
        return;
    }
  }

  async #resolve(client: ListenerClient, signal: AbortSignal): Promise<void> {
    const { scaleSetName: name, runnerGroup, labels, poolKey } = this.#o.spec;
    this.#session = undefined;
    const groupId = await client.runnerGroupId(runnerGroup, signal);
    let set = await client.findScaleSet(name, groupId, signal);
    if (set === undefined) {
      const all = [name, ...labels.filter((l) => l.toLowerCase() !== name.toLowerCase())];
      set = await client.createScaleSet({ name, runnerGroupId: groupId, labels: all.map((l) => ({ type: "System", name: l })) }, signal);
      this.#o.sink.event(poolKey, "Normal", "ScaleSetCreated", `Created runner scale set ${name} (id ${set.id}) in runner group ${runnerGroup}; jobs with runs-on: ${name} reach this pool`);
    }
    this.#scaleSet = set;
  }

  async #open(client: ListenerClient, signal: AbortSignal): Promise<void> {
    const set = this.#requireScaleSet();
    const recorded = this.#recordedSessionId;
    if (recorded !== undefined) {
      // The pool's status names the session of a leader that died without closing it: close it
      // now instead of waiting minutes for GitHub to expire it (the 409 ARC's listener loops on).
      this.#recordedSessionId = undefined;
      await client.deleteSession({ id: recorded, scaleSetId: set.id }, signal).catch((err: unknown) => {
        this.#o.logger.info({ pool: this.#o.spec.poolKey, err: describeError(err) }, "could not close the session a previous leader recorded");
      });
    }
    const session = await client.createSession(set.id, this.#o.ownerName, signal);
    this.#session = session;
    this.#lastMessageId = 0;
    this.#o.sink.statistics(this.#o.spec.poolKey, session.statistics);
  }

  /** How many jobs the pool can hold now, as the next poll will say it. */
  capacityNow(): number {
    const max = this.#o.spec.maxCapacity;
    const now = this.#o.capacity?.() ?? max;
    return Math.max(0, Math.min(max, Number.isFinite(now) ? Math.floor(now) : max));
  }

  /**
   * Room may have changed: a poll in flight that said another capacity ends, so the next one says
   * the new one. Less room is said at once (GitHub must not offer what the cluster lost); more room
   * at once or MIN_REPOLL_MS after that poll began, so growth sends GitHub at most about one poll a
   * second however fast the cluster changes. Never throws: counting the room must not take the
   * operator down, and the next poll says the capacity anyway.
   */
  nudge(): void {
    try {
      this.#nudge();
    } catch (err) {
      this.#o.logger.warn({ pool: this.#o.spec.poolKey, err: describeError(err) }, "could not count the pool's capacity");
    }
  }

  #nudge(): void {
    const poll = this.#inFlight;
    if (poll === undefined) return;
    const now = this.capacityNow();
    if (now === poll.capacity) return;
    const age = this.#clock.now() - poll.startedAt;
    if (now < poll.capacity || age >= MIN_REPOLL_MS) {
      poll.abort.abort();
      return;
    }
    if (this.#nudgeLater !== undefined) return;
    this.#nudgeLater = setTimeout(() => {
      this.#nudgeLater = undefined;
      this.nudge();
    }, MIN_REPOLL_MS - age);
    this.#nudgeLater.unref();
  }

  async #longPoll(client: ListenerClient, session: ScaleSetSession, signal: AbortSignal): Promise<ScaleSetMessage | undefined> {
    const capacity = this.capacityNow();
    this.#o.sink.capacity?.(this.#o.spec.poolKey, capacity);
    const poll = { capacity, startedAt: this.#clock.now(), abort: new AbortController() };
    this.#inFlight = poll;
    try {
      return await client.getMessage(session, this.#lastMessageId, capacity, AbortSignal.any([signal, poll.abort.signal]));
    } catch (err) {
      // Ended by nudge(): no message, and the next poll goes out at once with the new capacity.
      if (poll.abort.signal.aborted && !signal.aborted) return undefined;
      throw err;
    } finally {
      if (this.#inFlight === poll) this.#inFlight = undefined;
    }
  }

  async #poll(client: ListenerClient, signal: AbortSignal): Promise<void> {
    const session = this.#requireSession();
    const message = await this.#longPoll(client, session, signal);
    if (message === undefined) return;
    const { poolKey } = this.#o.spec;
    const available = message.jobs.filter((j) => j.messageType === "JobAvailable").map((j) => j.runnerRequestId);
    if (available.length > 0) {
      const acquired = await client.acquireJobs(session, available, signal);
      this.#o.logger.info({ pool: poolKey, offered: available.length, acquired: acquired.length }, "acquired jobs for the scale set");
    }
    for (const job of message.jobs) this.#o.sink.job(poolKey, job);
    this.#o.sink.statistics(poolKey, message.statistics);
    const faults = this.#o.faults ?? NO_FAULTS;
    await faults.hit("listener.before-ack", signal);
    await client.deleteMessage(session, message.id, signal);
    this.#lastMessageId = message.id;
    await faults.hit("listener.after-ack", signal);
  }

  async #close(): Promise<void> {
    clearTimeout(this.#nudgeLater);
    this.#nudgeLater = undefined;
    const session = this.#session;
    this.#session = undefined;
    if (session === undefined) return;
    try {
      const client = await this.#o.client(AbortSignal.timeout(CLOSE_TIMEOUT_MS));
      await client.deleteSession(session, AbortSignal.timeout(CLOSE_TIMEOUT_MS));
    } catch (err) {
      this.#o.logger.info({ pool: this.#o.spec.poolKey, err: describeError(err) }, "could not close the scale set's message session; GitHub expires it");
    }
    this.#o.sink.state(this.#o.spec.poolKey, { phase: "Resolving", reason: "Starting", message: "The listener stopped", scaleSetId: this.#scaleSet?.id, sessionId: undefined });
  }

  #report(step: ListenerStep, message: string): void {
    this.#o.sink.state(this.#o.spec.poolKey, { phase: step.phase, reason: step.reason, message, scaleSetId: this.#scaleSet?.id, sessionId: this.#session?.id });
  }

  #requireScaleSet(): RunnerScaleSet {
    if (this.#scaleSet === undefined) throw new ImpError("terminal", "ListenerError", "no scale set resolved yet");
    return this.#scaleSet;
  }

  #requireSession(): ScaleSetSession {
    if (this.#session === undefined) throw new ImpError("terminal", ScaleSetErrorCode.SessionNotFound, "no message session open");
    return this.#session;
  }
}

/** An error's place in the transition table. */
export function outcomeOf(err: unknown): ListenerOutcome {
  if (!(err instanceof ImpError)) return "failed";
  switch (err.code) {
    case ScaleSetErrorCode.SessionConflict:
      return "conflict";
    case ScaleSetErrorCode.ScaleSetNotFound:
      return "scaleSetGone";
    case ScaleSetErrorCode.SessionNotFound:
      return "sessionGone";
    case ScaleSetErrorCode.QueueTokenExpired:
      return "tokenExpired";
    case ScaleSetErrorCode.Unavailable:
    case "GitHubUnavailable":
    case "GitHubRateLimited":
      return "unavailable";
    case ScaleSetErrorCode.Unauthorized:
    case "GitHubUnauthorized":
    case "GitHubForbidden":
    case "CredentialsSecretMissing":
    case "CredentialsSecretInvalid":
      return "unauthorized";
    default:
      return "failed";
  }
}

export function describeReason(reason: ListeningReason, name: string): string {
  switch (reason) {
    case "Listening":
      return `Listening to runner scale set ${name}`;
    case "Starting":
      return `Connecting to runner scale set ${name}`;
    case "SessionConflict":
      return `Another listener holds the message session of scale set ${name} (or a crashed one's has not expired on GitHub yet); retrying`;
    case "SessionLost":
      return `The message session of scale set ${name} is gone on GitHub; opening a new one`;
    case "ScaleSetDeleted":
      return `Runner scale set ${name} was deleted on GitHub; creating it again`;
    case "QueueTokenExpired":
      return `The message queue token of scale set ${name} cannot be refreshed; retrying`;
    case "ActionsServiceUnavailable":
      return `The Actions service is unavailable; retrying with backoff`;
    case "CredentialsRefused":
      return `GitHub refused the pool's credentials for the scale-set API; retrying with backoff`;
    case "ListenerError":
      return `The scale-set listener of ${name} failed; retrying with backoff`;
  }
}
