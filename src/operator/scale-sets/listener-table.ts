/**
 * The scale-set listener's state machine, as data: for each phase and each outcome of that phase's
 * one step, the next phase, how long to wait first, and what the pool's `ScaleSetListening`
 * condition says. The listener (scale-set-listener.ts) only acts; every choice is here, a pure
 * function tested without a network.
 *
 *   Resolving  find the scale set by name, create it if missing
 *   Opening    open the scale set's one message session
 *   Polling    long-poll the queue; act on a message (acquire, busy/finished, demand), then ack
 *   Refreshing a new queue token for the session (after the queue answered 401)
 *
 * Semantics users of actions-runner-controller were burned by, each with a recovery that needs no
 * person: a 409 after a crash (the old session lives until GitHub expires it: retried every
 * `conflictRetryMs`), a refresh that 404s (a new session), the scale set deleted on GitHub (created
 * again), the queue token expiring mid-poll (refreshed), the Actions service down (backoff, capped).
 */
import { backoffDelay, type BackoffPolicy } from "../../shared/index.ts";

export const LISTENER_PHASES = ["Resolving", "Opening", "Polling", "Refreshing"] as const;
export type ListenerPhase = (typeof LISTENER_PHASES)[number];

/** What one step came to; `ok` covers a message handled and an empty poll alike. */
export const LISTENER_OUTCOMES = ["ok", "conflict", "scaleSetGone", "sessionGone", "tokenExpired", "unavailable", "unauthorized", "failed"] as const;
export type ListenerOutcome = (typeof LISTENER_OUTCOMES)[number];

/** The reasons of the pool's ScaleSetListening condition: a closed list. */
export const LISTENING_REASONS = ["Listening", "Starting", "SessionConflict", "SessionLost", "ScaleSetDeleted", "QueueTokenExpired", "ActionsServiceUnavailable", "CredentialsRefused", "ListenerError"] as const;
export type ListeningReason = (typeof LISTENING_REASONS)[number];

type Wait = "none" | "backoff" | "conflict";

interface Transition {
  readonly next: ListenerPhase;
  readonly wait: Wait;
  /** The condition while waiting for (or working on) the next phase; undefined leaves it as it is. */
  readonly reason?: ListeningReason;
  /** A Warning Event is recorded when the reason changes to one of these. */
  readonly warn?: boolean;
}

const retry = (phase: ListenerPhase, reason: ListeningReason): Transition => ({ next: phase, wait: "backoff", reason, warn: true });
const common = (phase: ListenerPhase): Record<"unavailable" | "unauthorized" | "failed", Transition> => ({
  unavailable: retry(phase, "ActionsServiceUnavailable"),
  unauthorized: retry(phase, "CredentialsRefused"),
  failed: retry(phase, "ListenerError"),
});

/** phase → outcome → transition. An outcome a phase cannot produce is absent (and treated as `failed`). */
export const LISTENER_TABLE: Readonly<Record<ListenerPhase, Partial<Record<ListenerOutcome, Transition>>>> = {
  Resolving: {
    ok: { next: "Opening", wait: "none" },
    ...common("Resolving"),
  },
  Opening: {
    ok: { next: "Polling", wait: "none", reason: "Listening" },
    conflict: { next: "Opening", wait: "conflict", reason: "SessionConflict", warn: true },
    scaleSetGone: { next: "Resolving", wait: "none", reason: "ScaleSetDeleted", warn: true },
    ...common("Opening"),
  },
  Polling: {
    ok: { next: "Polling", wait: "none", reason: "Listening" },
    tokenExpired: { next: "Refreshing", wait: "none" },
    sessionGone: { next: "Opening", wait: "none", reason: "SessionLost", warn: true },
    scaleSetGone: { next: "Resolving", wait: "none", reason: "ScaleSetDeleted", warn: true },
    ...common("Polling"),
  },
  Refreshing: {
    ok: { next: "Polling", wait: "none", reason: "Listening" },
    tokenExpired: retry("Refreshing", "QueueTokenExpired"),
    sessionGone: { next: "Opening", wait: "none", reason: "SessionLost", warn: true },
    scaleSetGone: { next: "Resolving", wait: "none", reason: "ScaleSetDeleted", warn: true },
    ...common("Refreshing"),
  },
};

export interface ListenerTimings {
  /** Between attempts while another session holds the scale set (GitHub expires a dead one after minutes). */
  readonly conflictRetryMs: number;
  readonly backoff: BackoffPolicy;
}

export const DEFAULT_LISTENER_TIMINGS: ListenerTimings = {
  conflictRetryMs: 30_000,
  backoff: { baseMs: 1_000, factor: 2, capMs: 60_000, jitter: 0.2, maxAttempts: Infinity },
};

export interface ListenerStep {
  readonly phase: ListenerPhase;
  /** Failed steps in a row (0 after a success): drives the backoff. */
  readonly failures: number;
  readonly reason: ListeningReason;
}

export interface ListenerDecision {
  readonly next: ListenerStep;
  readonly waitMs: number;
  /** Record a Warning Event: the condition changed to a reason a person should see. */
  readonly warn: boolean;
}

/** The next step after `outcome` of `step`: pure, `random` only for the backoff's jitter. */
export function decideListener(step: ListenerStep, outcome: ListenerOutcome, timings: ListenerTimings, random: () => number = Math.random): ListenerDecision {
  const t = LISTENER_TABLE[step.phase][outcome] ?? LISTENER_TABLE[step.phase].failed ?? retry(step.phase, "ListenerError");
  const failed = t.wait !== "none";
  const failures = failed ? step.failures + 1 : 0;
  const waitMs = t.wait === "none" ? 0 : t.wait === "conflict" ? timings.conflictRetryMs : backoffDelay(timings.backoff, failures, random);
  const reason = t.reason ?? step.reason;
  return { next: { phase: t.next, failures, reason }, waitMs, warn: (t.warn ?? false) && reason !== step.reason };
}

export const START: ListenerStep = { phase: "Resolving", failures: 0, reason: "Starting" };
