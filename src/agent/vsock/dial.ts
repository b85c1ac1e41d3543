import type { Socket } from "node:net";
import {
  backoffDelay,
  describeError,
  ImpError,
  retryableError,
  systemClock,
  type BackoffPolicy,
  type Clock,
} from "../../shared/index.ts";
import { askGuestPort, type AskedAttempt } from "./attempt.ts";

/** Options of {@link dialHybridVsock}. Defaults live in {@link defaultDialConfig}. */
export interface HybridVsockDialOptions {
  /** The VM's hybrid-vsock Unix socket (Firecracker `uds_path`, vhost-device-vsock `uds-path`). */
  readonly udsPath: string;
  /** The guest's vsock port. */
  readonly port: number;
  /** One Unix-socket connect. */
  readonly connectTimeoutMs?: number;
  /**
   * How long an asked `CONNECT` is waited for alone before another is asked beside it (doubling
   * per attempt still waiting, up to {@link MAX_PATIENCE_MS}). The first one is never closed unanswered
   * (see attempt.ts): whichever is answered `OK` first wins, the others are closed once answered.
   */
  readonly ackTimeoutMs?: number;
  /** The whole dial, all attempts included. */
  readonly totalTimeoutMs?: number;
  /** Delay between attempts; `maxAttempts` also bounds the loop. */
  readonly backoff?: BackoffPolicy;
  readonly clock?: Clock;
  readonly signal?: AbortSignal;
  /** Called after each failed attempt (all attempt failures are temporary), e.g. for debug logs. */
  readonly onAttemptFailed?: (err: ImpError, attempt: number) => void;
  /** Called when an attempt got no answer within its patience and another is asked beside it. */
  readonly onAttemptWaiting?: (attempt: number) => void;
}

/**
 * How long one CONNECT is waited for alone by default. A CONNECT sent before the guest's driver
 * was up was seen (loaded CI) to stay unanswered for a whole 120 s boot while a new one would have
 * been answered; one answered late must not be closed unanswered. So: wait a little, then ask again
 * beside it, keeping both.
 */
export const DEFAULT_ACK_TIMEOUT_MS = 2_000;
/** The longest a dial waits on its open attempts before asking once more. */
export const MAX_PATIENCE_MS = 15_000;
/** At most this many asked attempts wait at once; then the dial only waits. */
export const MAX_WAITING_ATTEMPTS = 16;
/** An attempt nobody waits for any more is closed after this even if never answered (a leaked fd is the alternative). */
export const ABANDONED_ATTEMPT_MAX_MS = 10 * 60_000;

/** Attempts stay frequent (≤ 250 ms apart): a booting guest's listener appears within seconds, and an attempt costs one Unix connect. */
export const VSOCK_DIAL_BACKOFF: BackoffPolicy = { baseMs: 50, factor: 1.5, capMs: 250, jitter: 0.2, maxAttempts: Infinity };

export function defaultDialConfig(): Required<Omit<HybridVsockDialOptions, "udsPath" | "port" | "signal" | "onAttemptFailed" | "onAttemptWaiting">> {
  return { connectTimeoutMs: 1_000, ackTimeoutMs: DEFAULT_ACK_TIMEOUT_MS, totalTimeoutMs: 30_000, backoff: VSOCK_DIAL_BACKOFF, clock: systemClock };
}

type Outcome = { readonly kind: "won" } | { readonly kind: "failed"; readonly error: unknown } | { readonly kind: "patience-over" };

/**
 * Connects to a guest vsock port through the VMM's hybrid-vsock Unix socket and returns the stream
 * positioned at the guest's first byte (bytes that arrived with the `OK` line are put back).
 *
 * Every failure is temporary: the socket may not exist yet (VMM starting), the VMM may close the
 * connection without an ack (guest not listening yet), the ack may be garbled. Attempts repeat with
 * backoff; an attempt not answered within its patience keeps waiting while a new one is asked beside
 * it. The first `OK` wins; the dial ends when `maxAttempts` is used up or `totalTimeoutMs` passes
 * (`VsockDialTimeout`, retryable, carrying the last failure) or `signal` aborts (rejects with the
 * signal's reason). Attempts still unanswered then are closed only once answered (attempt.ts).
 */
export async function dialHybridVsock(options: HybridVsockDialOptions): Promise<Socket> {
  const cfg = { ...defaultDialConfig(), ...definedOnly(options) };
  const total = timeoutSignal(cfg.clock, cfg.totalTimeoutMs, options.signal);
  const waiting = new Set<AskedAttempt>();
  let winner: Socket | undefined;
  let returned = false;
  const won = Promise.withResolvers<void>();
  const deadline = untilAborted(total.signal);
  try {
    let lastError: ImpError | undefined;
    for (let attempt = 1; ; attempt++) {
      if (winner !== undefined) break;
      options.signal?.throwIfAborted();
      if (total.signal.aborted) break;
      const outcome = await oneAttempt();
      if (winner !== undefined) break;
      if (outcome.kind === "patience-over") {
        options.onAttemptWaiting?.(attempt);
        if (attempt >= cfg.backoff.maxAttempts) break;
        continue;
      }
      if (outcome.kind !== "failed") continue;
      options.signal?.throwIfAborted();
      if (total.signal.aborted && outcome.error === total.signal.reason) break;
      lastError = outcome.error instanceof ImpError ? outcome.error : retryableError("VsockConnectFailed", describeError(outcome.error), { cause: outcome.error });
      options.onAttemptFailed?.(lastError, attempt);
      if (attempt >= cfg.backoff.maxAttempts || total.signal.aborted) break;
      try {
        await Promise.race([cfg.clock.sleep(backoffDelay(cfg.backoff, attempt), total.signal), won.promise]);
      } catch {
        options.signal?.throwIfAborted();
        break;
      }
    }
    // The last attempts may still be answered while the deadline is checked: one that was, wins.
    if (winner === undefined && !options.signal?.aborted && waiting.size > 0) await Promise.race([won.promise, deadline]);
    if (winner !== undefined) {
      returned = true;
      return winner;
    }
    options.signal?.throwIfAborted();
    throw retryableError(
      "VsockDialTimeout",
      `Cannot connect to guest vsock port ${options.port} via ${options.udsPath}: no OK within ${cfg.totalTimeoutMs} ms` +
        (lastError === undefined ? (waiting.size > 0 ? ` (${waiting.size} CONNECT(s) still unanswered)` : "") : ` (last attempt: ${lastError.message})`),
      { cause: lastError, context: { udsPath: options.udsPath, port: options.port } },
    );
  } finally {
    total.dispose();
    for (const attempt of waiting) attempt.abandonWhenAnswered(ABANDONED_ATTEMPT_MAX_MS);
    // A winner answered as the dial gave up (aborted in the same tick): answered, so safe to close.
    if (winner !== undefined && !returned) winner.destroy();
  }

  /** Asks once and waits for: any attempt's OK, this one's failure, its patience, or the deadline. */
  async function oneAttempt(): Promise<Outcome> {
    const asking = askGuestPort(options.udsPath, options.port, cfg.connectTimeoutMs, cfg.clock, total.signal);
    // An earlier attempt may win while this one connects: the winner goes back at once (it has no
    // 'error' listener until its caller adds one) and this one, if it asks, is closed once answered.
    const first = await Promise.race([asking.then((a) => ({ asked: a }), (error: unknown) => ({ error })), won.promise.then(() => "won" as const)]);
    if (first === "won") {
      asking.then((a) => a.abandonWhenAnswered(ABANDONED_ATTEMPT_MAX_MS), () => undefined);
      return { kind: "won" };
    }
    if ("error" in first) return { kind: "failed", error: first.error };
    const asked = first.asked;
    waiting.add(asked);
    const answer = asked.answered.then(
      (socket) => {
        waiting.delete(asked);
        if (winner === undefined) {
          winner = socket;
          won.resolve();
        } else {
          socket.destroy(); // answered, so safe to close
        }
        return { kind: "won" } as Outcome;
      },
      (error: unknown) => {
        waiting.delete(asked);
        return { kind: "failed", error } as Outcome;
      },
    );
    const stopPatience = new AbortController();
    const patienceMs = Math.min(cfg.ackTimeoutMs * 2 ** Math.max(0, waiting.size - 1), MAX_PATIENCE_MS);
    const patience: Promise<Outcome> =
      waiting.size >= MAX_WAITING_ATTEMPTS
        ? new Promise<Outcome>(() => undefined)
        : cfg.clock.sleep(patienceMs, stopPatience.signal).then(
            () => ({ kind: "patience-over" }) as Outcome,
            () => new Promise<Outcome>(() => undefined),
          );
    try {
      return await Promise.race([answer, won.promise.then(() => ({ kind: "won" }) as Outcome), patience, deadline.then(() => ({ kind: "failed", error: total.signal.reason }) as Outcome)]);
    } finally {
      stopPatience.abort();
    }
  }
}

/** An AbortSignal that fires after `ms` on `clock` or when `parent` aborts; dispose() stops the timer. */
function timeoutSignal(clock: Clock, ms: number, parent: AbortSignal | undefined): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const stopTimer = new AbortController();
  clock.sleep(ms, stopTimer.signal).then(
    () => controller.abort(retryableError("Timeout", `deadline of ${ms} ms passed`)),
    () => undefined,
  );
  const signal = parent === undefined ? controller.signal : AbortSignal.any([controller.signal, parent]);
  return { signal, dispose: () => stopTimer.abort() };
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** Resolves when `signal` aborts (never rejects). */
function untilAborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}
