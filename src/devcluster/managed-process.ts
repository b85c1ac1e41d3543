import { closeSync, openSync } from "node:fs";
import { Child } from "../shared/index.ts";

/** How long a process gets after SIGTERM before SIGKILL. */
export const STOP_GRACE_MS = 5_000;

export interface ManagedProcessOptions {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** stdout and stderr go here (appended), so a failed start leaves the process's own words behind. */
  readonly logFile: string;
  /**
   * Attached processes die with this Node.js process, even on SIGKILL (`setpriv --pdeathsig`).
   * Detached ones (for `imp dev cluster up`) outlive it.
   */
  readonly detached?: boolean;
}

/** One component of the dev control plane: a shared {@link Child} whose output goes to a log file. */
export class ManagedProcess {
  readonly name: string;
  readonly #child: Child;

  constructor(options: ManagedProcessOptions) {
    this.name = options.name;
    const fd = openSync(options.logFile, "a");
    try {
      const detached = options.detached ?? false;
      this.#child = new Child(options.name, options.command, options.args, { stdio: ["ignore", fd, fd], dieWithParent: !detached, detached });
    } finally {
      closeSync(fd);
    }
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** True until the process has exited. */
  get running(): boolean {
    return this.#child.running;
  }

  /** Resolves with the exit code (-1 for a signal or spawn failure) once the process has exited. */
  async exited(): Promise<number | null> {
    const exit = await this.#child.exited();
    return exit.spawnError !== undefined || exit.signal !== null ? -1 : exit.code;
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves only once the process is gone. Idempotent. */
  async stop(graceMs = STOP_GRACE_MS): Promise<void> {
    await this.#child.stop(graceMs);
  }
}
