import { EventEmitter } from "node:events";
import type { Duplex } from "node:stream";
import { ImpError, retryableError, systemClock, terminalError, type Clock, type ImpErrorCode } from "../../shared/index.ts";
import { encodeFrame, FrameDecoder, parseGuestFrame } from "./frame.ts";
import { EventQueue } from "./event-queue.ts";
import {
  PROTOCOL_VERSION,
  type ConfigureRequest,
  type ErrorReply,
  type ExecReply,
  type ExecRequest,
  type ExecStatusReply,
  type ExitEvent,
  type GuestEvent,
  type GuestMessage,
  type GuestReply,
  type HelloReply,
  type OutputEvent,
  type RequestType,
  type ShutdownMode,
  type SignalName,
} from "./messages.ts";

export interface GuestClientOptions {
  /** Default per-request timeout. Default 10 s. */
  readonly requestTimeoutMs?: number;
  /** Sent in `hello`. */
  readonly clientName?: string;
  /** Drives request timeouts; inject a FakeClock in tests. */
  readonly clock?: Clock;
}

export interface RequestOptions {
  /** Aborts the wait for the reply (the guest may still act on the request). */
  readonly signal?: AbortSignal;
  /** Overrides the client's default timeout for this request. */
  readonly timeoutMs?: number;
}

/** Events of a GuestClient. `close` fires once, with the reason if the stream failed. */
export interface GuestClientEvents {
  output: [OutputEvent];
  exit: [ExitEvent];
  close: [Error | undefined];
}

interface Pending {
  readonly type: RequestType;
  readonly resolve: (reply: GuestReply) => void;
  readonly reject: (err: unknown) => void;
}

/** How an exec ended, from an exit event or exec.status. */
export interface ExecOutcome {
  readonly execId: string;
  readonly state: "exited" | "failed";
  readonly exitCode?: number;
  readonly signal?: string;
  readonly error?: string;
}

function toOutcome(status: ExecOutcome | ExecStatusReply): ExecOutcome {
  if (status.state === "running") throw new Error("unreachable: a running exec has no outcome");
  const { execId, state, exitCode, signal, error } = status;
  return {
    execId,
    state,
    ...(exitCode === undefined ? {} : { exitCode }),
    ...(signal === undefined ? {} : { signal }),
    ...(error === undefined ? {} : { error }),
  };
}

/**
 * The guest's wire error codes (snake_case, docs/guest-protocol.md) as the project's PascalCase codes,
 * and whether a caller may retry after them (the guest may succeed later). A code the guest invents
 * becomes a terminal `GuestError`; `context.guestCode` always keeps the wire code.
 */
const GUEST_ERROR_CODES: Readonly<Record<string, { readonly code: ImpErrorCode; readonly retryable: boolean }>> = {
  frame_too_large: { code: "GuestRequestTooLarge", retryable: false },
  bad_json: { code: "GuestRequestUnparsable", retryable: false },
  bad_message: { code: "GuestRequestInvalid", retryable: false },
  unsupported_version: { code: "GuestVersionUnsupported", retryable: false },
  unknown_type: { code: "GuestRequestUnknown", retryable: false },
  not_found: { code: "GuestExecNotFound", retryable: false },
  too_many_execs: { code: "GuestTooManyExecs", retryable: false },
  shutting_down: { code: "GuestShuttingDown", retryable: false },
  configure_failed: { code: "GuestConfigureFailed", retryable: true },
  too_many_streams: { code: "GuestTooManyStreams", retryable: false },
  internal: { code: "GuestInternalError", retryable: true },
};

/** The ImpError code and class of a guest `error` reply's wire code. */
function guestErrorCode(wireCode: string): { readonly code: ImpErrorCode; readonly retryable: boolean } {
  return Object.hasOwn(GUEST_ERROR_CODES, wireCode) ? (GUEST_ERROR_CODES[wireCode] as { code: ImpErrorCode; retryable: boolean }) : { code: "GuestError", retryable: false };
}

/**
 * Host side of the guest protocol over one byte stream (a net.Socket to vsock, a virtio-serial
 * chardev socket, or a test pipe). Requests are matched to replies by id, so many may be in flight.
 * Every guest message is bounded and schema-checked; a protocol violation closes the stream, rejects
 * every pending request and emits `close` with the reason. Requests after close reject at once with
 * a retryable `GuestChannelClosed` error. Guest `error` replies reject with an ImpError whose code is
 * `guestErrorCode(<wire code>)` (e.g. `not_found` → `GuestExecNotFound`). The client never logs; exec environments pass through it untouched.
 */
export class GuestClient extends EventEmitter<GuestClientEvents> {
  readonly #stream: Duplex;
  readonly #decoder = new FrameDecoder();
  readonly #pending = new Map<number, Pending>();
  readonly #queues = new Set<EventQueue<GuestEvent>>();
  readonly #timeoutMs: number;
  readonly #clientName: string;
  readonly #clock: Clock;
  #nextId = 1;
  #closedReason: Error | undefined;
  #closed = false;

  constructor(stream: Duplex, options: GuestClientOptions = {}) {
    super();
    this.#stream = stream;
    this.#timeoutMs = options.requestTimeoutMs ?? 10_000;
    this.#clientName = options.clientName ?? "imp-agent";
    this.#clock = options.clock ?? systemClock;
    stream.on("data", (chunk: Buffer) => this.#onData(chunk));
    stream.on("error", (err: Error) =>
      this.#close(retryableError("GuestChannelFailed", "Cannot use guest channel: the stream failed", { cause: err })),
    );
    // The guest ended its side: nothing more can be answered, so release our side too.
    stream.on("end", () => {
      this.#close(undefined);
      stream.destroy();
    });
    stream.on("close", () => this.#close(undefined));
  }

  /** True once the stream has closed; every later request fails. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Negotiates the protocol version; fails with GuestVersionUnsupported when there is none in common. */
  async hello(options?: RequestOptions): Promise<HelloReply> {
    const reply = (await this.#request("hello", { versions: [PROTOCOL_VERSION], client: this.#clientName }, options)) as HelloReply;
    if (!reply.versions.includes(PROTOCOL_VERSION)) {
      throw terminalError("GuestVersionUnsupported", `Cannot talk to guest: it speaks protocol versions ${reply.versions.join(",")}, this agent speaks ${PROTOCOL_VERSION} (rebuild the image with a matching guest agent)`);
    }
    return reply;
  }

  /** Sets hostname / network / entropy. Idempotent on the guest side. */
  async configure(request: ConfigureRequest, options?: RequestOptions): Promise<void> {
    const body: Record<string, unknown> = {};
    if (request.hostname !== undefined) body.hostname = request.hostname;
    if (request.network !== undefined) body.network = { dns: [], ...request.network };
    if (request.entropySeed !== undefined) body.entropySeed = Buffer.from(request.entropySeed).toString("base64");
    if (request.unixTimeMs !== undefined) body.unixTimeMs = Math.round(request.unixTimeMs);
    if (request.exitRecordKey !== undefined) body.exitRecordKey = Buffer.from(request.exitRecordKey).toString("base64");
    await this.#request("configure", body, options);
  }

  /**
   * Starts (or finds) the exec with `request.execId`. Safe to repeat after an ambiguous failure:
   * the guest never starts a second process for a known id (`started` is then false).
   */
  async exec(request: ExecRequest, options?: RequestOptions): Promise<ExecReply> {
    const { stdin, ...fields } = request;
    const reply = (await this.#request("exec", { ...fields, ...(stdin === undefined ? {} : { stdin: Buffer.from(stdin).toString("base64") }) }, options)) as ExecReply;
    this.#expectExecId(reply.execId, request.execId);
    return reply;
  }

  /** Current state of an exec; fails with GuestExecNotFound for an unknown id. */
  async execStatus(execId: string, options?: RequestOptions): Promise<ExecStatusReply> {
    const reply = (await this.#request("exec.status", { execId }, options)) as ExecStatusReply;
    this.#expectExecId(reply.execId, execId);
    return reply;
  }

  /** Signals the exec's process group; a no-op when it already exited. */
  async signal(execId: string, signal: SignalName, options?: RequestOptions): Promise<void> {
    await this.#request("signal", { execId, signal }, options);
  }

  /** Asks the guest to shut down; resolves when the guest acknowledged (before it powers off). */
  async shutdown(mode: ShutdownMode, options?: RequestOptions): Promise<void> {
    await this.#request("shutdown", { mode }, options);
  }

  /**
   * Resolves when the exec is no longer running: from its `exit` event, or from `exec.status` if it
   * had already ended (e.g. before a reconnect). Subscribes before asking, so an exit cannot slip
   * between the two. Rejects with GuestChannelClosed if the stream closes first, with GuestExecNotFound for
   * an unknown id, or with the signal's reason on abort. The wait itself has no timeout: pass a signal.
   */
  async waitForExit(execId: string, options: { signal?: AbortSignal } = {}): Promise<ExecOutcome> {
    const { signal } = options;
    let cleanup = (): void => undefined;
    const exited = new Promise<ExecOutcome>((resolve, reject) => {
      const onExit = (e: ExitEvent): void => {
        if (e.execId !== execId) return;
        resolve({ execId, state: "exited", exitCode: e.exitCode, ...(e.signal === undefined ? {} : { signal: e.signal }) });
      };
      const onClose = (reason: Error | undefined): void =>
        reject(retryableError("GuestChannelClosed", `Cannot wait for exec ${execId}: the stream closed`, reason === undefined ? {} : { cause: reason }));
      const onAbort = (): void => reject(signal?.reason);
      this.on("exit", onExit);
      this.on("close", onClose);
      signal?.addEventListener("abort", onAbort, { once: true });
      cleanup = () => {
        this.off("exit", onExit);
        this.off("close", onClose);
        signal?.removeEventListener("abort", onAbort);
      };
    });
    try {
      const status = await Promise.race([this.execStatus(execId, signal === undefined ? {} : { signal }), exited]);
      if (status.state !== "running") return toOutcome(status);
      return await exited;
    } finally {
      cleanup();
    }
  }

  /**
   * Output and exit events from now on, as an async iterator. Holds at most `maxBuffered` events for a
   * slow consumer; beyond that the iterator throws GuestEventsOverflow. Ends when the stream closes
   * or `signal` aborts.
   */
  events(options: { signal?: AbortSignal; maxBuffered?: number } = {}): AsyncIterableIterator<GuestEvent> {
    const queue = new EventQueue<GuestEvent>(options.maxBuffered ?? 4096, () => this.#queues.delete(queue));
    if (this.#closed) queue.end(this.#closedReason);
    else this.#queues.add(queue);
    options.signal?.addEventListener("abort", () => queue.end(undefined), { once: true });
    return queue;
  }

  /** Closes the stream; pending requests reject with GuestChannelClosed. Idempotent. */
  close(): void {
    this.#close(undefined);
    this.#stream.destroy();
  }

  #expectExecId(got: string, want: string): void {
    if (got !== want) {
      const err = terminalError("GuestMessageInvalid", `Cannot accept guest reply: it names exec ${got}, asked for ${want}`);
      this.#fail(err);
      throw err;
    }
  }

  async #request(type: RequestType, fields: Record<string, unknown>, options: RequestOptions = {}): Promise<GuestReply> {
    if (this.#closed) {
      throw retryableError("GuestChannelClosed", `Cannot send guest request ${type}: the stream is closed`, { cause: this.#closedReason });
    }
    options.signal?.throwIfAborted();
    const id = this.#allocateId();
    const frame = encodeFrame({ v: PROTOCOL_VERSION, type, id, ...fields });
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const stopTimer = new AbortController();
    const reply = new Promise<GuestReply>((resolve, reject) => {
      this.#pending.set(id, { type, resolve, reject });
    });
    const timeout = this.#clock.sleep(timeoutMs, stopTimer.signal).then(
      () => {
        throw retryableError("GuestTimeout", `Cannot complete guest request ${type}: no reply within ${timeoutMs} ms`, { context: { id } });
      },
      () => new Promise<never>(() => undefined),
    );
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(options.signal?.reason);
      options.signal?.addEventListener("abort", onAbort, { once: true });
    });
    this.#stream.write(frame);
    try {
      return await Promise.race([reply, timeout, aborted]);
    } finally {
      stopTimer.abort();
      if (onAbort !== undefined) options.signal?.removeEventListener("abort", onAbort);
      this.#pending.delete(id);
    }
  }

  #allocateId(): number {
    for (;;) {
      const id = this.#nextId;
      this.#nextId = id >= 0xffff_ffff ? 1 : id + 1;
      if (!this.#pending.has(id)) return id;
    }
  }

  #onData(chunk: Buffer): void {
    if (this.#closed) return;
    let bodies: Buffer[];
    try {
      bodies = this.#decoder.push(chunk);
    } catch (err) {
      this.#fail(err);
      return;
    }
    for (const body of bodies) {
      try {
        this.#dispatch(parseGuestFrame(body));
      } catch (err) {
        this.#fail(err);
        return;
      }
      if (this.#closed) return;
    }
  }

  #dispatch(message: GuestMessage): void {
    switch (message.type) {
      case "output":
      case "exit":
        this.#emitEvent(message);
        return;
      case "error":
        this.#onErrorReply(message);
        return;
      default: {
        const pending = this.#pending.get(message.id);
        // A late reply to a request that timed out or was aborted is not a violation.
        if (pending === undefined) return;
        if (pending.type !== message.type) {
          throw terminalError("GuestMessageInvalid", `Cannot accept guest reply: request ${message.id} was ${pending.type}, reply is ${message.type}`);
        }
        pending.resolve(message);
      }
    }
  }

  #onErrorReply(message: ErrorReply): void {
    const pending = this.#pending.get(message.id);
    const { code, retryable } = guestErrorCode(message.code);
    const make = retryable ? retryableError : terminalError;
    // context.guestCode marks an answer from the guest (as opposed to a broken stream or a timeout).
    const err = make(code, `Cannot complete guest request ${pending?.type ?? "?"}: guest says ${message.code}: ${message.message}`, { context: { guestCode: message.code } });
    if (pending !== undefined) {
      pending.reject(err);
      return;
    }
    // id 0 errors are about the stream itself; frame_too_large means the guest closes it.
    if (message.id === 0 && message.code === "frame_too_large") this.#fail(err);
  }

  #emitEvent(event: GuestEvent): void {
    for (const queue of this.#queues) queue.push(event);
    if (event.type === "output") this.emit("output", event);
    else this.emit("exit", event);
  }

  #fail(err: unknown): void {
    const reason = err instanceof ImpError ? err : terminalError("GuestMessageInvalid", "Cannot read guest stream", { cause: err });
    this.#close(reason);
    this.#stream.destroy();
  }

  #close(reason: Error | undefined): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#closedReason = reason;
    const closedErr = retryableError("GuestChannelClosed", "Cannot complete guest request: the stream closed", reason === undefined ? {} : { cause: reason });
    for (const pending of this.#pending.values()) pending.reject(closedErr);
    this.#pending.clear();
    for (const queue of this.#queues) queue.end(reason);
    this.#queues.clear();
    this.emit("close", reason);
  }
}
