import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { backoffDelay, terminalError, waitFor, type BackoffPolicy } from "../../shared/index.ts";
import type { VmExit, VmmProcess } from "../vmm/types.ts";
import { cgroupPids, removeCgroup } from "./cgroups.ts";
import { SupervisorConnection } from "./connection.ts";
import { liveness, type ProcessRef } from "./proc.ts";
import type { SupervisorStatus } from "./protocol.ts";
import { readExitRecord, sameProcess, SUPERVISOR_FILES, type SupervisorExit, type SupervisorIdentity } from "./records.ts";

/** How a supervised process ended. `recorded` is false only when its supervisor died without recording it. */
export interface SupervisedExit extends VmExit {
  readonly recorded: boolean;
  /** When the supervisor reaped the process (RFC 3339). */
  readonly at?: string;
}

export interface SupervisedProcessOptions {
  /** Bound on each connect (and its hello) and each request; default 5 s. */
  readonly requestTimeoutMs?: number;
}

/** While connected, exits arrive as events; this paces the reconnects and exit.json checks after a drop. */
const WATCH_BACKOFF: BackoffPolicy = { baseMs: 100, factor: 2, capMs: 2_000, jitter: 0.2, maxAttempts: Infinity };
/** A supervisor that died unrecorded took its process with it (PDEATHSIG); this bounds the wait for that. */
const ORPHAN_GONE_TIMEOUT_MS = 10_000;

/**
 * A process running under `imp-supervisor`, seen from the agent: its identity (pid and start time of
 * both the supervisor and the process), the connection on which the exit event arrives, and the exit
 * as the supervisor recorded it. Obtained from {@link SupervisorLauncher.launch} or {@link adoptSupervised}.
 */
export class SupervisedProcess implements VmmProcess {
  readonly name: string;
  readonly pid: number;
  /** The supervision directory (socket, supervisor.json, exit.json). */
  readonly dir: string;
  readonly identity: SupervisorIdentity;
  readonly #timeoutMs: number;
  #connection: SupervisorConnection | undefined;
  #exit: SupervisedExit | undefined;
  readonly #exited: Promise<SupervisedExit>;
  #stopping: Promise<SupervisedExit> | undefined;
  #detached = false;

  /** `connection` while the process runs; `recordedExit` (from exit.json) once it has exited. */
  constructor(dir: string, identity: SupervisorIdentity, connection: SupervisorConnection | undefined, options: SupervisedProcessOptions = {}, recordedExit?: SupervisedExit) {
    this.name = identity.name;
    this.pid = identity.process.pid;
    this.dir = dir;
    this.identity = identity;
    this.#timeoutMs = options.requestTimeoutMs ?? 5_000;
    this.#connection = connection;
    this.#exit = recordedExit;
    this.#exited = (recordedExit === undefined ? this.#watch() : Promise.resolve(recordedExit)).then((exit) => {
      this.#exit = exit;
      this.#connection?.close();
      return exit;
    });
  }

  get running(): boolean {
    return this.#exit === undefined;
  }

  exited(): Promise<SupervisedExit> {
    return this.#exited;
  }

  signal(signal: NodeJS.Signals): void {
    if (this.#exit !== undefined) return;
    void this.#send(signal).catch(() => {
      // The supervisor is gone or refused: the watch reports the exit either way.
    });
  }

  async stop(graceMs: number): Promise<SupervisedExit> {
    if (this.#exit !== undefined) return this.#exit;
    this.#stopping ??= (async () => {
      this.signal("SIGTERM");
      const timer = setTimeout(() => this.signal("SIGKILL"), graceMs);
      try {
        return await this.#exited;
      } finally {
        clearTimeout(timer);
      }
    })();
    return this.#stopping;
  }

  /** Drops the connection without touching the process, as an agent does when it shuts down. */
  detach(): void {
    this.#detached = true;
    this.#connection?.close();
  }

  /** After the exit: removes the supervision directory, so the exit counts as collected. */
  async remove(): Promise<void> {
    if (this.#exit === undefined) throw terminalError("SupervisedProcessRunning", `Cannot remove supervision directory ${this.dir}: ${this.name} is still running (stop it and wait for its exit first)`);
    await rm(this.dir, { recursive: true, force: true });
  }

  async #send(signal: NodeJS.Signals): Promise<void> {
    const open = this.#connection?.open === true ? this.#connection : undefined;
    if (open !== undefined) {
      await open.request("signal", this.#timeoutMs, signal);
      return;
    }
    const once = await SupervisorConnection.connect(join(this.dir, SUPERVISOR_FILES.socket), this.#timeoutMs);
    try {
      await once.request("signal", this.#timeoutMs, signal);
    } finally {
      once.close();
    }
  }

  /** Resolves with the exit: from the event while connected; from exit.json, or the supervisor's death, otherwise. */
  async #watch(): Promise<SupervisedExit> {
    for (let attempt = 1; ; attempt++) {
      if (this.#connection !== undefined) {
        const final = await this.#connection.ended;
        if (final?.exit !== undefined && sameProcess(final.process, this.identity.process)) return exitOf(final);
        this.#connection = undefined;
      }
      const recorded = await this.#recorded();
      if (recorded !== undefined) return recorded;
      if ((await liveness(this.identity.supervisor)) !== "alive") {
        // exit.json is written before the supervisor exits; read it once more in case it just did.
        const late = await this.#recorded();
        if (late !== undefined) return late;
        await waitUntilGone(this.identity.process, ORPHAN_GONE_TIMEOUT_MS);
        await this.#removeCgroupLeftBehind();
        return { code: null, signal: "SIGKILL", recorded: false };
      }
      await new Promise((r) => setTimeout(r, backoffDelay(WATCH_BACKOFF, attempt)));
      if (this.#detached) return new Promise<never>(() => {}); // nobody listens any more
      try {
        this.#connection = await SupervisorConnection.connect(join(this.dir, SUPERVISOR_FILES.socket), this.#timeoutMs);
      } catch {
        // not reachable right now; the next round looks at exit.json and the supervisor again
      }
    }
  }

  /** A supervisor that died could not remove its cgroup; once its process is gone, nothing else will. */
  async #removeCgroupLeftBehind(): Promise<void> {
    const leaf = this.identity.cgroup;
    if (leaf === undefined) return;
    try {
      if ((await cgroupPids(leaf)).length > 0) return; // not ours to kill here; the sweep handles it
      await removeCgroup(leaf);
      await removeCgroup(dirname(leaf), 0);
    } catch {
      // the group still holds another process's leaf (EBUSY), or it is already gone
    }
  }

  async #recorded(): Promise<SupervisedExit | undefined> {
    const record = await readExitRecord(this.dir).catch(() => undefined);
    if (record === undefined || !sameProcess(record.process, this.identity.process)) return undefined;
    return asSupervisedExit(record);
  }
}

function exitOf(status: SupervisorStatus): SupervisedExit {
  const exit = status.exit;
  if (exit === undefined) throw new Error("status without exit");
  return asSupervisedExit(exit);
}

/** An exit as the supervisor recorded it (exit.json, the exit event or a hello). */
export function asSupervisedExit(exit: SupervisorExit): SupervisedExit {
  return { code: exit.code, signal: exit.signal, at: exit.at, ...(exit.memory === undefined ? {} : { memory: exit.memory }), recorded: true };
}

async function waitUntilGone(ref: ProcessRef, timeoutMs: number): Promise<void> {
  await waitFor(`see pid ${ref.pid} gone`, async () => ((await liveness(ref)) === "alive" ? undefined : true), { timeoutMs, intervalMs: 50 });
}
