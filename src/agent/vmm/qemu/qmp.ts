/**
 * A QEMU Machine Protocol client over QEMU's Unix socket (`-qmp unix:…,server=on`), just enough to
 * pause, save, load and resume a VM. Our own, not a package: the npm QMP clients are unmaintained
 * toys without timeouts, and QMP is newline-delimited JSON with one greeting and one capabilities
 * handshake. Commands go one at a time, matched by `id`; asynchronous events are ignored. Every
 * command is bounded; a socket that closes fails whatever waits.
 */
import type { Socket } from "node:net";
import { retryableError, terminalError, waitFor, withDeadline, type ImpError } from "../../../shared/index.ts";
import { connectUnix } from "../unix-socket.ts";

/** A QMP reply line is small; a peer that sends more without a newline is not QEMU. */
const MAX_LINE_BYTES = 1 << 20;

interface Pending {
  readonly id: string;
  readonly command: string;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: ImpError) => void;
}

export class QmpClient {
  readonly #socket: Socket;
  readonly #path: string;
  #buffer = "";
  #pending: Pending | undefined;
  #chain: Promise<unknown> = Promise.resolve();
  #nextId = 1;
  #closed: ImpError | undefined;
  #greeted: (() => void) | undefined;

  private constructor(socket: Socket, path: string) {
    this.#socket = socket;
    this.#path = path;
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.#onData(chunk));
    socket.on("error", () => undefined);
    socket.on("close", () => this.#fail(retryableError("QmpClosed", `Cannot talk to QEMU over ${path}: the monitor socket closed`)));
  }

  /**
   * Connects once QEMU listens (retrying until `timeoutMs`), reads the greeting and leaves
   * negotiation mode. Rejects with a retryable `Timeout` or the socket's error.
   */
  static async connect(path: string, options: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<QmpClient> {
    const socket = await waitFor(`connect to QEMU's monitor at ${path}`, () => connectUnix(path, "QmpConnectFailed", `QEMU's monitor at ${path}`), { timeoutMs: options.timeoutMs, intervalMs: 20, ...(options.signal === undefined ? {} : { signal: options.signal }) });
    const client = new QmpClient(socket, path);
    try {
      await withDeadline(`read QEMU's greeting on ${path}`, options.timeoutMs, (signal) => client.#waitForGreeting(signal), options.signal);
      await client.execute("qmp_capabilities", {}, { timeoutMs: options.timeoutMs });
      return client;
    } catch (err) {
      client.close();
      throw err;
    }
  }

  /** Runs one command and returns its `return` value; a QMP `error` is a terminal `QmpCommandFailed`. */
  execute<T = unknown>(command: string, args: Record<string, unknown> = {}, options: { readonly timeoutMs: number }): Promise<T> {
    const run = this.#chain.then(() => this.#send(command, args, options.timeoutMs));
    this.#chain = run.catch(() => undefined);
    return run as Promise<T>;
  }

  close(): void {
    this.#socket.destroy();
  }

  #send(command: string, args: Record<string, unknown>, timeoutMs: number): Promise<unknown> {
    if (this.#closed !== undefined) return Promise.reject(this.#closed);
    const id = `imp-${this.#nextId++}`;
    return withDeadline(`run QMP command ${command}`, timeoutMs, (signal) => new Promise((resolve, reject) => {
      this.#pending = { id, command, resolve, reject };
      signal.addEventListener("abort", () => {
        if (this.#pending?.id === id) this.#pending = undefined;
        reject(signal.reason);
      }, { once: true });
      this.#socket.write(`${JSON.stringify({ execute: command, arguments: args, id })}\n`);
    }));
  }

  #waitForGreeting(signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.#closed !== undefined) return reject(this.#closed);
      this.#greeted = resolve;
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  }

  #onData(chunk: string): void {
    this.#buffer += chunk;
    if (this.#buffer.length > MAX_LINE_BYTES && !this.#buffer.includes("\n")) {
      this.#fail(terminalError("QmpProtocolError", `Cannot talk to QEMU over ${this.#path}: a line over ${MAX_LINE_BYTES} bytes`));
      this.close();
      return;
    }
    for (let nl = this.#buffer.indexOf("\n"); nl >= 0; nl = this.#buffer.indexOf("\n")) {
      const line = this.#buffer.slice(0, nl).trim();
      this.#buffer = this.#buffer.slice(nl + 1);
      if (line !== "") this.#onMessage(line);
    }
  }

  #onMessage(line: string): void {
    let message: { QMP?: unknown; id?: unknown; return?: unknown; error?: { class?: unknown; desc?: unknown } };
    try {
      message = JSON.parse(line) as typeof message;
    } catch {
      this.#fail(terminalError("QmpProtocolError", `Cannot talk to QEMU over ${this.#path}: not JSON: ${line.slice(0, 200)}`));
      this.close();
      return;
    }
    if (message.QMP !== undefined) {
      this.#greeted?.();
      this.#greeted = undefined;
      return;
    }
    const pending = this.#pending;
    if (pending === undefined || message.id !== pending.id) return; // an event, or a reply nobody waits for any more
    this.#pending = undefined;
    if (message.error !== undefined) {
      pending.reject(terminalError("QmpCommandFailed", `QEMU refused ${pending.command}: ${String(message.error.class)}: ${String(message.error.desc)}`));
    } else {
      pending.resolve(message.return);
    }
  }

  #fail(err: ImpError): void {
    this.#closed ??= err;
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.reject(err);
  }
}
