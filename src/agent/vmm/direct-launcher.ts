/**
 * A {@link ProcessLauncher} whose processes are direct children of this Node.js process (tests,
 * `imp run`). stdout and stderr go straight to the request's files (opened for append and handed to
 * the child), so a child never blocks on a pipe we stopped reading and its output survives us.
 */
import { closeSync, openSync } from "node:fs";
import { assertExecutable, Child, terminalError, type ChildExit } from "../../shared/index.ts";
import type { LaunchRequest, ProcessLauncher, VmmProcess, VmExit } from "./types.ts";

export interface DirectLauncherOptions {
  /** Kill every launched process when this process dies, even by SIGKILL (tests). A node agent leaves this off. */
  readonly dieWithParent?: boolean;
}

export class DirectLauncher implements ProcessLauncher {
  readonly #dieWithParent: boolean;

  constructor(options: DirectLauncherOptions = {}) {
    this.#dieWithParent = options.dieWithParent ?? false;
  }

  async launch(request: LaunchRequest): Promise<VmmProcess> {
    await assertExecutable(request.name, request.binary, "VmmSpawnFailed");
    // The shared Child has no cwd option; coreutils `env -C` changes directory and then execs, so the
    // pid stays the program's own (as it does through setpriv).
    const [binary, args] = request.cwd === undefined ? [request.binary, request.args] : ["env", ["-C", request.cwd, "--", request.binary, ...request.args]];
    const stdout = openSync(request.stdoutPath, "a");
    let child: Child;
    try {
      const stderr = request.stderrPath === request.stdoutPath ? stdout : openSync(request.stderrPath, "a");
      try {
        child = new Child(request.name, binary, args, { stdio: ["ignore", stdout, stderr], dieWithParent: this.#dieWithParent, spawnErrorCode: "VmmSpawnFailed" });
      } finally {
        if (stderr !== stdout) closeSync(stderr);
      }
    } finally {
      // The child holds its own copies of the descriptors from here on.
      closeSync(stdout);
    }
    await child.spawned();
    const pid = child.pid;
    if (pid === undefined) throw terminalError("VmmSpawnFailed", `Cannot start ${request.name}: no pid after spawn`);
    return new DirectProcess(child, pid);
  }
}

/** A {@link VmmProcess} backed by a {@link Child}. */
class DirectProcess implements VmmProcess {
  readonly name: string;
  readonly pid: number;
  readonly #child: Child;

  constructor(child: Child, pid: number) {
    this.name = child.name;
    this.pid = pid;
    this.#child = child;
  }

  exited(): Promise<VmExit> {
    return this.#child.exited();
  }

  get running(): boolean {
    return this.#child.running;
  }

  signal(signal: NodeJS.Signals): void {
    if (this.#child.running) this.#child.process.kill(signal);
  }

  stop(graceMs: number): Promise<ChildExit> {
    return this.#child.stop(graceMs);
  }
}
