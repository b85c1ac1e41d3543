import { spawn, type ChildProcess } from "node:child_process";
import { openSync, closeSync } from "node:fs";

/** How long a process gets after SIGTERM before SIGKILL. */
export const STOP_GRACE_MS = 5_000;

export interface ManagedProcessOptions {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** stdout and stderr go here (appended), so a failed test leaves the process's own words behind. */
  readonly logFile: string;
  /**
   * Attached processes die with this Node.js process, even on SIGKILL: they are started through
   * `setpriv --pdeathsig SIGKILL`. Detached ones (for `imp dev cluster up`) outlive it.
   */
  readonly detached?: boolean;
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Last line of defence against leaks when a test throws or is interrupted: kill what is still running. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const child of live) child.kill("SIGKILL");
  });
}

/** One child process of the dev control plane: spawned with its log captured, stopped with a grace period, never leaked. */
export class ManagedProcess {
  readonly name: string;
  readonly #child: ChildProcess;
  readonly #exited: Promise<number | null>;
  #exitCode: number | null | undefined;

  constructor(options: ManagedProcessOptions) {
    this.name = options.name;
    const fd = openSync(options.logFile, "a");
    try {
      const detached = options.detached ?? false;
      const [command, args] = detached
        ? [options.command, options.args]
        : ["setpriv", ["--pdeathsig", "SIGKILL", "--", options.command, ...options.args]];
      this.#child = spawn(command, args, { stdio: ["ignore", fd, fd], detached });
    } finally {
      closeSync(fd);
    }
    if (options.detached === true) {
      this.#child.unref();
    } else {
      installExitHook();
      live.add(this.#child);
    }
    this.#exited = new Promise((resolve) => {
      this.#child.once("exit", (code, signal) => {
        live.delete(this.#child);
        this.#exitCode = code ?? (signal === null ? null : -1);
        resolve(this.#exitCode);
      });
      this.#child.once("error", () => {
        live.delete(this.#child);
        this.#exitCode = -1;
        resolve(-1);
      });
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** True until the process has exited. */
  get running(): boolean {
    return this.#exitCode === undefined;
  }

  /** Resolves with the exit code (-1 for a signal or spawn failure) once the process has exited. */
  exited(): Promise<number | null> {
    return this.#exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves only once the process is gone. Idempotent. */
  async stop(graceMs = STOP_GRACE_MS): Promise<void> {
    if (!this.running) return;
    this.#child.kill("SIGTERM");
    const timer = setTimeout(() => this.#child.kill("SIGKILL"), graceMs);
    try {
      await this.#exited;
    } finally {
      clearTimeout(timer);
    }
  }
}
