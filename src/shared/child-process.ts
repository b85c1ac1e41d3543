import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { access, constants } from "node:fs/promises";
import { delimiter, join } from "node:path";
import { terminalError, type ImpErrorCode } from "./errors.ts";

/** How a child process ended. `spawnError` is set when it never started. */
export interface ChildExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly spawnError?: Error;
}

const attached = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Last line of defence for attached children when this process exits without stopping them. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const child of attached) child.kill("SIGKILL");
  });
}

export interface ChildOptions {
  readonly stdio: StdioOptions;
  /**
   * Start through `setpriv --pdeathsig SIGKILL` (util-linux) so the child dies with this process even
   * on SIGKILL. Tests use that; a node agent leaves it off because VMMs must outlive an agent restart.
   */
  readonly dieWithParent: boolean;
  /** Own process group and no reference from this process: it outlives us (`imp dev cluster up`). */
  readonly detached?: boolean;
  /** Error code when the program cannot be started; default `SpawnFailed`. */
  readonly spawnErrorCode?: ImpErrorCode;
}

/**
 * A spawned helper process (QEMU, vhost-device-vsock, the dev control plane's components): its exit
 * as a promise, a SIGTERM-then-SIGKILL stop, and no leak when this process exits.
 */
export class Child {
  readonly name: string;
  readonly process: ChildProcess;
  readonly #exited: Promise<ChildExit>;
  #exit: ChildExit | undefined;

  readonly #spawnErrorCode: ImpErrorCode;

  constructor(name: string, command: string, args: readonly string[], options: ChildOptions) {
    this.name = name;
    this.#spawnErrorCode = options.spawnErrorCode ?? "SpawnFailed";
    const [cmd, argv] = options.dieWithParent ? ["setpriv", ["--pdeathsig", "SIGKILL", "--", command, ...args]] : [command, [...args]];
    this.process = spawn(cmd, argv, { stdio: options.stdio, detached: options.detached ?? false });
    if (options.detached === true) this.process.unref();
    if (options.dieWithParent) {
      installExitHook();
      attached.add(this.process);
    }
    this.#exited = new Promise((resolve) => {
      const done = (exit: ChildExit): void => {
        if (this.#exit !== undefined) return;
        this.#exit = exit;
        attached.delete(this.process);
        resolve(exit);
      };
      // 'close' (not 'exit') so that piped stdout has been read to the end when this resolves.
      this.process.once("close", (code, signal) => done({ code, signal }));
      this.process.once("error", (err) => done({ code: null, signal: null, spawnError: err }));
    });
  }

  /** Resolves once the process runs; rejects with a terminal error if it could not be started. */
  async spawned(): Promise<void> {
    if (this.process.pid !== undefined) return;
    const failed = this.#exit?.spawnError;
    if (failed !== undefined) throw terminalError(this.#spawnErrorCode, `Cannot start ${this.name}: ${failed.message}`, { cause: failed });
    await new Promise<void>((resolve, reject) => {
      this.process.once("spawn", resolve);
      this.process.once("error", (err) =>
        reject(terminalError(this.#spawnErrorCode, `Cannot start ${this.name}: ${err.message}`, { cause: err })),
      );
    });
  }

  get pid(): number | undefined {
    return this.process.pid;
  }

  get running(): boolean {
    return this.#exit === undefined;
  }

  exited(): Promise<ChildExit> {
    return this.#exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. Idempotent. */
  async stop(graceMs: number): Promise<ChildExit> {
    if (this.#exit !== undefined) return this.#exit;
    this.process.kill("SIGTERM");
    const timer = setTimeout(() => this.process.kill("SIGKILL"), graceMs);
    try {
      return await this.#exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Fails with a terminal error (`code`) unless `command` (a path, or a name looked up in PATH) is an
 * executable file. Checked before spawning because through `setpriv` a missing binary would only show
 * as a later exit status 127.
 */
export async function assertExecutable(name: string, command: string, code: ImpErrorCode = "SpawnFailed"): Promise<void> {
  const candidates = command.includes("/") ? [command] : (process.env.PATH ?? "").split(delimiter).filter(Boolean).map((d) => join(d, command));
  for (const candidate of candidates) {
    try {
      await access(candidate, constants.X_OK);
      return;
    } catch {
      // try the next PATH entry
    }
  }
  throw terminalError(code, `Cannot start ${name}: ${command} is not an executable file${command.includes("/") ? "" : " on PATH"}`);
}

/** "exit status 1", "signal SIGKILL", "spawn error: ..." — for messages. */
export function describeExit(exit: ChildExit): string {
  if (exit.spawnError !== undefined) return `spawn error: ${exit.spawnError.message}`;
  if (exit.signal !== null) return `signal ${exit.signal}`;
  return `exit status ${exit.code ?? "?"}`;
}
