/**
 * One hybrid-vsock connection request: Unix connect, `CONNECT <port>`, and the VMM's answer.
 *
 * Once `CONNECT` is written the request may reach the guest at any later time, so an asked attempt
 * is never closed before it is answered: vhost-device-vsock 0.3.0 writes a late `OK` to a socket the
 * host closed through `unwrap()`, gets EPIPE, and its vring worker thread panics — from then on no
 * connection to that VM is answered again. An answered attempt (OK, close, garbage) is safe to close.
 */
import { createConnection, type Socket } from "node:net";
import { retryableError, type Clock } from "../../shared/index.ts";
import { connectLine, parseAck } from "./handshake.ts";

/** An attempt whose `CONNECT` was written and whose answer may still come. */
export interface AskedAttempt {
  /** Resolves with the stream (guest bytes after `OK` put back) or rejects (socket destroyed) when the VMM answers; never on time. */
  readonly answered: Promise<Socket>;
  /** For an attempt nobody waits for any more: close it once answered, or after `maxMs` at most (a last resort against leaking it; the timer does not hold the process). */
  abandonWhenAnswered(maxMs: number): void;
}

/**
 * Connects (bounded by `connectTimeoutMs`; nothing is asked yet, so giving up is safe) and writes
 * `CONNECT`. Rejects with a retryable ImpError, or with `parent`'s reason, if the connect fails.
 */
export async function askGuestPort(udsPath: string, port: number, connectTimeoutMs: number, clock: Clock, parent: AbortSignal): Promise<AskedAttempt> {
  const socket = createConnection({ path: udsPath });
  const context = { udsPath, port };
  try {
    await boundedStep(clock, connectTimeoutMs, parent, (done, fail) => {
      socket.once("connect", done);
      socket.once("error", (err) => fail(retryableError("VsockConnectFailed", `Cannot connect to ${udsPath}: ${err.message}`, { cause: err, context })));
      return () => retryableError("VsockConnectTimeout", `Cannot connect to ${udsPath}: no connection within ${connectTimeoutMs} ms`, { context });
    });
  } catch (err) {
    socket.destroy();
    throw err;
  }
  socket.removeAllListeners("connect");
  socket.removeAllListeners("error");
  socket.write(connectLine(port));
  const answered = awaitAnswer(socket, port, context);
  let abandoned = false;
  return {
    answered,
    abandonWhenAnswered(maxMs) {
      if (abandoned) return;
      abandoned = true;
      socket.unref();
      const lastResort = setTimeout(() => socket.destroy(), maxMs);
      lastResort.unref();
      answered.then((s) => s.destroy(), () => undefined).finally(() => clearTimeout(lastResort));
    },
  };
}

function awaitAnswer(socket: Socket, port: number, context: { readonly udsPath: string; readonly port: number }): Promise<Socket> {
  return new Promise<Socket>((resolve, reject) => {
    let received = Buffer.alloc(0);
    const fail = (err: Error): void => {
      cleanup();
      socket.destroy();
      reject(err);
    };
    const onReadable = (): void => {
      for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) {
        received = Buffer.concat([received, chunk]);
        const ack = parseAck(received);
        if (ack.kind === "incomplete") continue;
        if (ack.kind === "bad") {
          fail(retryableError("VsockHandshakeInvalid", `Cannot open guest vsock port ${port}: ${ack.reason}`, { context }));
          return;
        }
        // Without the 'readable' listener a later 'data' listener puts the socket in flowing mode;
        // the caller attaches its own 'error' listener at once.
        cleanup();
        if (ack.rest.length > 0) socket.unshift(ack.rest);
        resolve(socket);
        return;
      }
    };
    const onEnd = (): void =>
      fail(retryableError("VsockHandshakeFailed", `Cannot open guest vsock port ${port}: the VMM closed the connection without OK (guest not listening yet?)`, { context }));
    const onError = (err: Error): void =>
      fail(retryableError("VsockHandshakeFailed", `Cannot open guest vsock port ${port}: ${err.message}`, { cause: err, context }));
    const cleanup = (): void => {
      socket.removeListener("readable", onReadable);
      socket.removeListener("end", onEnd);
      socket.removeListener("error", onError);
    };
    socket.on("readable", onReadable);
    socket.once("end", onEnd);
    socket.once("error", onError);
  });
}

/**
 * Runs one bounded step. `setup` wires `done`/`fail` and returns the error to reject with on
 * timeout. Settles once; a parent abort rejects with the parent's reason.
 */
function boundedStep(clock: Clock, timeoutMs: number, parent: AbortSignal, setup: (done: () => void, fail: (err: unknown) => void) => () => Error): Promise<void> {
  return new Promise<void>((resolve, reject) => {
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
      () => settle(resolve),
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
