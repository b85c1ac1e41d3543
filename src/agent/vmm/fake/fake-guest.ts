/**
 * A guest agent for tests of the VM lifecycle without a VM: it serves the real guest protocol
 * (docs/guest-protocol.md) on a Unix socket, runs scripted workloads instead of processes, and
 * writes its console — boot lines and authenticated exit records — to a file the way the real agent's
 * console reaches the VMM's log. Frames go through the same codec the host uses.
 */
import { appendFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import type { Clock } from "../../../shared/index.ts";
import { encodeFrame, FrameDecoder } from "../../guest/index.ts";
import { exitRecordLine } from "../../guest/index.ts";

/** What the scripted workload of one exec does. */
export interface FakeWorkload {
  /** Exit code after `runMs` (128 + n for a signal). */
  readonly exitCode: number;
  readonly signal?: string;
  readonly runMs: number;
  /** Output written before the exit. */
  readonly stdout?: string;
  /** Lines the job writes to the console while it runs (forged records, fatal-looking lines). */
  readonly consoleLines?: readonly string[];
  /** The exec fails to start with this error instead. */
  readonly startError?: string;
}

interface ExecState {
  state: "running" | "exited" | "failed";
  exitCode?: number;
  signal?: string;
  error?: string;
  readonly env: Readonly<Record<string, string>>;
}

export class FakeGuest {
  readonly #console: string;
  readonly #clock: Clock;
  readonly #workload: (env: Readonly<Record<string, string>>) => FakeWorkload;
  readonly #onShutdown: (mode: string) => void;
  readonly #streams = new Set<Socket>();
  readonly execs = new Map<string, ExecState>();
  #server: Server | undefined;
  #key: Buffer | undefined;
  #answering = true;
  configured: Record<string, unknown> | undefined;
  /** Streams the host opened so far (a reconnect opens one more). */
  streamsOpened = 0;

  constructor(options: { readonly consolePath: string; readonly clock: Clock; readonly workload: (env: Readonly<Record<string, string>>) => FakeWorkload; readonly onShutdown: (mode: string) => void }) {
    this.#console = options.consolePath;
    this.#clock = options.clock;
    this.#workload = options.workload;
    this.#onShutdown = options.onShutdown;
  }

  /** Starts serving at `socketPath` (the "guest agent came up"). */
  listen(socketPath: string): Promise<void> {
    this.console("imp-guest: guest agent serving");
    return new Promise((resolve, reject) => {
      const server = createServer((socket) => this.#serve(socket));
      server.once("error", reject);
      server.listen(socketPath, () => resolve());
      this.#server = server;
    });
  }

  /** A guest that accepts streams and never answers (a hung agent). */
  mute(): void {
    this.#answering = false;
  }

  /** Writes a console line, as the guest's kernel or any of its processes can. */
  console(line: string): void {
    appendFileSync(this.#console, `${line}\n`);
  }

  /** Drops every open stream (a lost channel); the guest keeps running. */
  dropStreams(): void {
    for (const s of this.#streams) s.destroy();
  }

  close(): void {
    this.dropStreams();
    this.#server?.close();
  }

  #serve(socket: Socket): void {
    this.#streams.add(socket);
    this.streamsOpened++;
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      for (const body of decoder.push(chunk)) this.#handle(socket, JSON.parse(body.toString("utf8")) as Record<string, unknown>);
    });
    socket.on("error", () => undefined);
    socket.on("close", () => this.#streams.delete(socket));
  }

  #send(socket: Socket, message: object): void {
    if (!socket.destroyed) socket.write(encodeFrame(message));
  }

  #broadcast(message: object): void {
    for (const s of this.#streams) this.#send(s, message);
  }

  #handle(socket: Socket, req: Record<string, unknown>): void {
    if (!this.#answering) return;
    const id = req.id as number;
    const reply = (fields: object): void => this.#send(socket, { v: 1, type: req.type, id, ...fields });
    switch (req.type) {
      case "hello":
        reply({ versions: [1], agent: "imp-guest/fake", capabilities: ["configure", "exec", "exec.status", "signal", "shutdown", "output", "exit", "exit-record"] });
        return;
      case "configure":
        if (typeof req.exitRecordKey === "string") this.#key = Buffer.from(req.exitRecordKey, "base64");
        this.configured = req;
        reply({});
        return;
      case "exec":
        reply(this.#exec(req));
        return;
      case "exec.status": {
        const e = this.execs.get(req.execId as string);
        if (e === undefined) {
          this.#send(socket, { v: 1, type: "error", id, code: "not_found", message: "no such exec" });
          return;
        }
        reply({ execId: req.execId, ...stateFields(e) });
        return;
      }
      case "signal":
        reply({});
        return;
      case "shutdown":
        reply({});
        this.#onShutdown(req.mode as string);
        return;
    }
  }

  #exec(req: Record<string, unknown>): object {
    const execId = req.execId as string;
    const known = this.execs.get(execId);
    if (known !== undefined) return { execId, started: false, ...stateFields(known) };
    const env = req.env as Record<string, string>;
    const w = this.#workload(env);
    if (w.startError !== undefined) {
      const failed: ExecState = { state: "failed", error: w.startError, env };
      this.execs.set(execId, failed);
      return { execId, started: false, ...stateFields(failed) };
    }
    const state: ExecState = { state: "running", env };
    this.execs.set(execId, state);
    void this.#run(execId, state, w, req.shutdownAfterExit as string | undefined);
    return { execId, started: true, state: "running", pid: 100 };
  }

  async #run(execId: string, state: ExecState, w: FakeWorkload, shutdownAfterExit: string | undefined): Promise<void> {
    for (const line of w.consoleLines ?? []) this.console(line);
    if (w.stdout !== undefined) this.#broadcast({ v: 1, type: "output", id: 0, execId, stream: "stdout", seq: 0, data: Buffer.from(w.stdout).toString("base64") });
    if (w.runMs > 0) await this.#clock.sleep(w.runMs);
    // As the real agent: the record is on the console before anyone can learn of the exit.
    if (this.#key !== undefined) {
      const line = exitRecordLine(this.#key, { execId, exitCode: w.exitCode, ...(w.signal === undefined ? {} : { signal: w.signal }) });
      this.console(line);
      this.console(line);
    }
    state.state = "exited";
    state.exitCode = w.exitCode;
    if (w.signal !== undefined) state.signal = w.signal;
    this.#broadcast({ v: 1, type: "exit", id: 0, execId, exitCode: w.exitCode, ...(w.signal === undefined ? {} : { signal: w.signal }) });
    if (shutdownAfterExit !== undefined) this.#onShutdown(shutdownAfterExit);
  }
}

function stateFields(e: ExecState): object {
  return { state: e.state, ...(e.exitCode === undefined ? {} : { exitCode: e.exitCode }), ...(e.signal === undefined ? {} : { signal: e.signal }), ...(e.error === undefined ? {} : { error: e.error }) };
}
