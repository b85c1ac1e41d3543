import { createConnection, type Socket } from "node:net";
import { retryableError, terminalError } from "../../shared/index.ts";
import { encodeRequest, LineDecoder, parseMessage, type SupervisorMessage, type SupervisorStatus } from "./protocol.ts";

/**
 * One connection to a supervisor's socket. It resolves `hello()` with the status the supervisor greets
 * with, answers requests, and resolves `ended` once the connection is gone: with the final status if
 * the supervisor sent the exit event, with undefined if the connection dropped without one.
 */
export class SupervisorConnection {
  readonly socketPath: string;
  readonly #socket: Socket;
  readonly #pending = new Map<number, { resolve: (m: SupervisorMessage & { type: "reply" }) => void; reject: (e: Error) => void }>();
  #nextId = 1;
  #finalStatus: SupervisorStatus | undefined;
  readonly hello: Promise<SupervisorStatus>;
  readonly ended: Promise<SupervisorStatus | undefined>;

  private constructor(socketPath: string, socket: Socket, timeoutMs: number) {
    this.socketPath = socketPath;
    this.#socket = socket;
    const decoder = new LineDecoder();
    let resolveHello!: (s: SupervisorStatus) => void;
    let rejectHello!: (e: Error) => void;
    this.hello = new Promise((resolve, reject) => {
      resolveHello = resolve;
      rejectHello = reject;
    });
    this.hello.catch(() => {}); // observed by connect(); a late failure is reported through `ended`
    const helloTimer = setTimeout(() => {
      rejectHello(retryableError("SupervisorUnreachable", `Cannot connect to supervisor at ${socketPath}: no hello within ${timeoutMs} ms`));
      socket.destroy();
    }, timeoutMs);
    this.ended = new Promise((resolve) => {
      socket.once("close", () => {
        clearTimeout(helloTimer);
        rejectHello(retryableError("SupervisorUnreachable", `Cannot connect to supervisor at ${socketPath}: connection closed before hello`));
        for (const p of this.#pending.values()) p.reject(retryableError("SupervisorUnreachable", `Cannot complete supervisor request at ${socketPath}: the connection closed before the answer`));
        this.#pending.clear();
        resolve(this.#finalStatus);
      });
    });
    socket.on("error", (err) => {
      rejectHello(retryableError("SupervisorUnreachable", `Cannot connect to supervisor at ${socketPath}: ${err.message}`, { cause: err }));
    });
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      let lines: string[];
      try {
        lines = decoder.push(chunk);
      } catch {
        socket.destroy();
        return;
      }
      for (const line of lines) {
        const message = parseMessage(line);
        if (message === undefined) {
          socket.destroy();
          return;
        }
        if (message.type === "hello") {
          clearTimeout(helloTimer);
          resolveHello(message.status);
        } else if (message.type === "exit") {
          clearTimeout(helloTimer);
          this.#finalStatus = message.status;
          resolveHello(message.status); // an exit that raced our connect counts as the greeting
        } else if (message.id === undefined) {
          // Refused before hello (too many connections): nothing else will come.
          rejectHello(retryableError("SupervisorUnreachable", `Cannot connect to supervisor at ${socketPath}: ${message.error ?? "refused"}`));
          socket.destroy();
        } else {
          this.#pending.get(message.id)?.resolve(message);
          this.#pending.delete(message.id);
        }
      }
    });
  }

  /** Connects and waits for the greeting (bounded by `timeoutMs`). */
  static async connect(socketPath: string, timeoutMs: number): Promise<SupervisorConnection> {
    const socket = createConnection(socketPath);
    const connection = new SupervisorConnection(socketPath, socket, timeoutMs);
    await connection.hello;
    return connection;
  }

  get open(): boolean {
    return !this.#socket.destroyed;
  }

  /** Keeps the connection from holding the event loop open (an agent exits when it is done). */
  unref(): void {
    this.#socket.unref();
  }

  async request(op: "status", timeoutMs: number): Promise<SupervisorStatus>;
  async request(op: "signal", timeoutMs: number, signal: NodeJS.Signals): Promise<void>;
  async request(op: "status" | "signal", timeoutMs: number, signal?: NodeJS.Signals): Promise<SupervisorStatus | void> {
    if (!this.open) throw retryableError("SupervisorUnreachable", `Cannot send ${op} to supervisor at ${this.socketPath}: connection closed`);
    const id = this.#nextId++;
    const reply = await new Promise<SupervisorMessage & { type: "reply" }>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(retryableError("Timeout", `Cannot send ${op} to supervisor at ${this.socketPath}: no reply within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, {
        resolve: (m) => { clearTimeout(timer); resolve(m); },
        reject: (e) => { clearTimeout(timer); reject(retryableError("SupervisorUnreachable", `Cannot send ${op} to supervisor at ${this.socketPath}: ${e.message}`)); },
      });
      this.#socket.write(encodeRequest(op === "status" ? { id, op } : { id, op, signal: signal ?? "SIGTERM" }));
    });
    if (!reply.ok) throw terminalError("SupervisorRefused", `Cannot ${op} through supervisor at ${this.socketPath}: ${reply.error ?? "refused"}`);
    if (op === "status") {
      if (reply.status === undefined) throw terminalError("SupervisorRefused", `Cannot read status from supervisor at ${this.socketPath}: reply without status`);
      return reply.status;
    }
  }

  close(): void {
    this.#socket.destroy();
  }
}
