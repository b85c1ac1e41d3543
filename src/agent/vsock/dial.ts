import { createConnection, type Socket } from "node:net";
import {
  backoffDelay,
  describeError,
  ImpError,
  retryableError,
  systemClock,
  type BackoffPolicy,
  type Clock,
} from "../../shared/index.ts";
import { connectLine, parseAck } from "./handshake.ts";

/** Options of {@link dialHybridVsock}. Defaults live in {@link defaultDialConfig}. */
export interface HybridVsockDialOptions {
  /** The VM's hybrid-vsock Unix socket (Firecracker `uds_path`, vhost-device-vsock `uds-path`). */
  readonly udsPath: string;
  /** The guest's vsock port. */
  readonly port: number;
  /** One Unix-socket connect. */
  readonly connectTimeoutMs?: number;
  /**
   * From `CONNECT` written to `OK` read; by default {@link DEFAULT_ACK_TIMEOUT_MS} (or the dial's
   * deadline, if shorter). An attempt is given up late, because its request may still reach the guest: vhost-device-vsock 0.3.0 answers a
   * connection the host abandoned with `OK` written through `unwrap()`, gets EPIPE, and its
   * vring worker thread panics — from then on no connection to that VM is ever answered. Before
   * the guest's driver is up, and when nothing listens, the VMM closes the connection at once. A
   * dial still gives up its last CONNECT at the deadline; that ends its VM anyway (a boot times
   * out, a reconnect that fails fails the VM), so a backend it kills takes nothing else with it.
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
}

/**
 * How long one CONNECT waits for its OK unless told otherwise. Long, because vhost-device-vsock 0.3.0
 * panics on an OK for a CONNECT the host gave up (see `ackTimeoutMs`); bounded, because a CONNECT
 * sent before the guest's driver was up was seen (loaded CI) to stay unanswered for a whole 120 s
 * boot while a new one would have been answered.
 */
export const DEFAULT_ACK_TIMEOUT_MS = 15_000;

/** Attempts stay frequent (≤ 250 ms apart): a booting guest's listener appears within seconds, and an attempt costs one Unix connect. */
export const VSOCK_DIAL_BACKOFF: BackoffPolicy = { baseMs: 50, factor: 1.5, capMs: 250, jitter: 0.2, maxAttempts: Infinity };

export function defaultDialConfig(): Required<Omit<HybridVsockDialOptions, "udsPath" | "port" | "signal" | "onAttemptFailed" | "ackTimeoutMs">> {
  return { connectTimeoutMs: 1_000, totalTimeoutMs: 30_000, backoff: VSOCK_DIAL_BACKOFF, clock: systemClock };
}

/**
 * Connects to a guest vsock port through the VMM's hybrid-vsock Unix socket and returns the stream
 * positioned at the guest's first byte (bytes that arrived with the `OK` line are put back).
 *
 * Every step has its own timeout and every failure is temporary: the socket may not exist yet (VMM
 * starting), the VMM may close the connection without an ack (guest not listening yet), the ack may
 * be late or garbled. Attempts repeat with backoff until one succeeds, `maxAttempts` is used up or
 * `totalTimeoutMs` passes (`VsockDialTimeout`, retryable, carrying the last attempt's error), or
 * `signal` aborts (rejects with the signal's reason). Never leaves a socket open on failure.
 */
export async function dialHybridVsock(options: HybridVsockDialOptions): Promise<Socket> {
  const given = { ...defaultDialConfig(), ...definedOnly(options) };
  const cfg = { ...given, ackTimeoutMs: options.ackTimeoutMs ?? Math.min(given.totalTimeoutMs, DEFAULT_ACK_TIMEOUT_MS) };
  const total = timeoutSignal(cfg.clock, cfg.totalTimeoutMs, options.signal);
  try {
    let lastError: ImpError | undefined;
    for (let attempt = 1; ; attempt++) {
      options.signal?.throwIfAborted();
      if (total.signal.aborted) break;
      try {
        return await dialOnce(options.udsPath, options.port, cfg, total.signal);
      } catch (err) {
        options.signal?.throwIfAborted();
        if (total.signal.aborted && err === total.signal.reason) break;
        lastError = err instanceof ImpError ? err : retryableError("VsockConnectFailed", describeError(err), { cause: err });
        options.onAttemptFailed?.(lastError, attempt);
        if (attempt >= cfg.backoff.maxAttempts || total.signal.aborted) break;
        try {
          await cfg.clock.sleep(backoffDelay(cfg.backoff, attempt), total.signal);
        } catch {
          options.signal?.throwIfAborted();
          break;
        }
      }
    }
    throw retryableError(
      "VsockDialTimeout",
      `Cannot connect to guest vsock port ${options.port} via ${options.udsPath}: no OK within ${cfg.totalTimeoutMs} ms` +
        (lastError === undefined ? "" : ` (last attempt: ${lastError.message})`),
      { cause: lastError, context: { udsPath: options.udsPath, port: options.port } },
    );
  } finally {
    total.dispose();
  }
}

interface StepConfig {
  readonly connectTimeoutMs: number;
  readonly ackTimeoutMs: number;
  readonly clock: Clock;
}

/** One attempt: connect, CONNECT, wait for OK. Rejects with a retryable ImpError; destroys the socket on failure. */
async function dialOnce(udsPath: string, port: number, cfg: StepConfig, parent: AbortSignal): Promise<Socket> {
  const socket = createConnection({ path: udsPath });
  const context = { udsPath, port };
  try {
    await step(cfg.clock, cfg.connectTimeoutMs, parent, (done, fail) => {
      socket.once("connect", done);
      socket.once("error", (err) =>
        fail(retryableError("VsockConnectFailed", `Cannot connect to ${udsPath}: ${err.message}`, { cause: err, context })),
      );
      return () => retryableError("VsockConnectTimeout", `Cannot connect to ${udsPath}: no connection within ${cfg.connectTimeoutMs} ms`, { context });
    });
    socket.write(connectLine(port));
    const rest = await step<Buffer>(cfg.clock, cfg.ackTimeoutMs, parent, (done, fail) => {
      let received = Buffer.alloc(0);
      const onReadable = (): void => {
        for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) {
          received = Buffer.concat([received, chunk]);
          const ack = parseAck(received);
          if (ack.kind === "incomplete") continue;
          // Removing the 'readable' listener lets a later 'data' listener put the socket in flowing mode.
          socket.removeListener("readable", onReadable);
          if (ack.kind === "bad") {
            fail(retryableError("VsockHandshakeInvalid", `Cannot open guest vsock port ${port}: ${ack.reason}`, { context }));
          } else {
            done(ack.rest);
          }
          return;
        }
      };
      socket.on("readable", onReadable);
      socket.once("end", () =>
        fail(retryableError("VsockHandshakeFailed", `Cannot open guest vsock port ${port}: the VMM closed the connection without OK (guest not listening yet?)`, { context })),
      );
      socket.once("error", (err) =>
        fail(retryableError("VsockHandshakeFailed", `Cannot open guest vsock port ${port}: ${err.message}`, { cause: err, context })),
      );
      return () => retryableError("VsockHandshakeTimeout", `Cannot open guest vsock port ${port}: no OK within ${cfg.ackTimeoutMs} ms`, { context });
    });
    // The handshake's listeners go; the caller attaches its own 'error' listener at once.
    socket.removeAllListeners("end");
    socket.removeAllListeners("error");
    if (rest.length > 0) socket.unshift(rest);
    return socket;
  } catch (err) {
    socket.destroy();
    throw err;
  }
}

/**
 * Runs one bounded step. `setup` wires `done`/`fail` to the socket and returns the error to reject
 * with on timeout. Settles once; a parent abort rejects with the parent's reason.
 */
function step<T = void>(
  clock: Clock,
  timeoutMs: number,
  parent: AbortSignal,
  setup: (done: (value: T) => void, fail: (err: unknown) => void) => () => Error,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = new AbortController();
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      timer.abort();
      parent.removeEventListener("abort", onParentAbort);
      fn();
    };
    const onParentAbort = (): void => settle(() => reject(parent.reason));
    const timeoutError = setup(
      (value) => settle(() => resolve(value)),
      (err) => settle(() => reject(err)),
    );
    if (parent.aborted) {
      onParentAbort();
      return;
    }
    parent.addEventListener("abort", onParentAbort, { once: true });
    clock.sleep(timeoutMs, timer.signal).then(
      () => settle(() => reject(timeoutError())),
      () => undefined, // aborted because the step settled
    );
  });
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
