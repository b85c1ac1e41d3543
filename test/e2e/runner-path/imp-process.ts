/**
 * An `imp` command (`imp operator`, `imp agent`) as its own process, as it runs on a real cluster:
 * its log to a file, SIGKILL-able at any moment (the fault suite), restartable with the same
 * arguments. The process dies with the test process (setpriv --pdeathsig) so a crashed test leaves
 * no operator or agent behind; an agent's VMMs, under their supervisors, are cleaned up separately.
 */
import { closeSync, openSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { IMP_NODE_FLAGS } from "../../../src/cli/node-flags.ts";
import { Child, describeExit } from "../../../src/shared/index.ts";

const repoRoot = resolve(import.meta.dirname, "../../..");
const cli = join(repoRoot, "src/cli/main.ts");

export class ImpProcess {
  readonly name: string;
  readonly logPath: string;
  readonly #args: readonly string[];
  #env: Record<string, string>;
  #child: Child | undefined;
  #starts = 0;

  constructor(name: string, args: readonly string[], logPath: string, env: Record<string, string> = {}) {
    this.name = name;
    this.#args = args;
    this.logPath = logPath;
    this.#env = env;
  }

  get pid(): number | undefined {
    return this.#child?.running === true ? this.#child.pid : undefined;
  }

  get starts(): number {
    return this.#starts;
  }

  /** Starts the process (again); `env` replaces the extra environment (e.g. a fault plan) from now on. */
  async start(env?: Record<string, string>): Promise<void> {
    if (this.#child?.running === true) throw new Error(`${this.name} is already running`);
    if (env !== undefined) this.#env = env;
    const fd = openSync(this.logPath, "a");
    try {
      // Child spawns with the process environment; the extra env goes through `env`, so a fault plan
      // set for one start does not leak into the next.
      const extra = Object.entries(this.#env).map(([k, v]) => `${k}=${v}`);
      this.#child = new Child(this.name, "env", [...extra, process.execPath, ...IMP_NODE_FLAGS, cli, ...this.#args], { stdio: ["ignore", fd, fd], dieWithParent: true });
      await this.#child.spawned();
      this.#starts++;
    } finally {
      closeSync(fd);
    }
  }

  /** SIGKILL, as a crash; resolves once the process is gone. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (child === undefined || !child.running) return;
    child.process.kill("SIGKILL");
    await child.exited();
  }

  /** SIGTERM (a clean shutdown), SIGKILL after `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    await this.#child?.stop(graceMs);
  }

  /** Resolves when the process exits on its own; tells how. */
  async exited(): Promise<string> {
    const child = this.#child;
    if (child === undefined) return "never started";
    return describeExit(await child.exited());
  }

  get running(): boolean {
    return this.#child?.running === true;
  }

  /** The last `lines` lines of its log. */
  tail(lines = 40): string {
    try {
      return readFileSync(this.logPath, "utf8").split("\n").slice(-lines - 1).join("\n");
    } catch {
      return "(no log)";
    }
  }

  log(): string {
    try {
      return readFileSync(this.logPath, "utf8");
    } catch {
      return "";
    }
  }
}
