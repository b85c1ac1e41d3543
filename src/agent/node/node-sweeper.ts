/**
 * The sweep: at start and periodically, everything on this node that maps to no live ImpVM bound here
 * is stopped and removed — supervisors and VMM processes (killed and verified gone by pid and start
 * time), their cgroups, VM directories (sockets, disks), and taps. A node that comes back after being
 * declared lost finds its old VMs gone from the API (or terminal and released), so their leftovers go.
 */
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { describeError, type Clock, type Logger } from "../../shared/index.ts";
import { sweepSupervised, type SupervisorCgroupOptions } from "../supervisor/index.ts";

export interface SweepResult {
  readonly processes: number;
  readonly supervisors: number;
  readonly cgroups: number;
  readonly dirs: number;
  readonly taps: number;
  /** Memory snapshots evicted beyond their size limit. */
  readonly snapshots: number;
  readonly errors: readonly string[];
}

export interface NodeSweeperOptions {
  readonly vmsDir: string;
  /** Uids that must be kept: VMs bound here that are not yet released, and VMs the runtime holds. */
  readonly liveUids: () => ReadonlySet<string>;
  readonly cgroup?: SupervisorCgroupOptions | undefined;
  /**
   * Removes taps of VMs not live; returns the removed names. `live` answers `has` with the live set at
   * the moment of asking and cannot be listed (a copy of it would be empty).
   */
  readonly sweepNetwork?: ((live: LiveSet) => Promise<readonly string[]>) | undefined;
  /** Evicts memory snapshots beyond their limit and what a crash left of a build; returns the evicted keys. */
  readonly sweepSnapshots?: (() => Promise<readonly string[]>) | undefined;
  readonly onSwept?: (result: SweepResult) => void;
  readonly intervalMs?: number;
  readonly clock: Clock;
  readonly logger: Logger;
}

export class NodeSweeper {
  readonly #o: NodeSweeperOptions;

  constructor(options: NodeSweeperOptions) {
    this.#o = options;
  }

  async start(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.sweepOnce().catch((err: unknown) => this.#o.logger.warn({ error: describeError(err) }, "sweep failed; next round retries"));
      await this.#o.clock.sleep(this.#o.intervalMs ?? 60_000, signal).catch(() => undefined);
    }
  }

  async sweepOnce(): Promise<SweepResult> {
    // Liveness is asked at decision time, after each listing: a VM that starts while the sweep runs
    // is live by the time its files are looked at, so it is never taken for a leftover.
    const live = new LiveUids(() => this.#o.liveUids());
    const counts = await sweepSupervised(this.#o.vmsDir, live, this.#o.cgroup === undefined ? {} : { cgroup: this.#o.cgroup });
    let dirs = 0;
    const errors = [...counts.errors];
    for (const name of await readdir(this.#o.vmsDir).catch(() => [] as string[])) {
      if (this.#o.liveUids().has(name)) continue;
      try {
        await rm(join(this.#o.vmsDir, name), { recursive: true, force: true });
        dirs++;
      } catch (err) {
        errors.push(`cannot remove ${name}: ${describeError(err)}`);
      }
    }
    const taps = this.#o.sweepNetwork === undefined ? [] : await this.#o.sweepNetwork(live).catch((err: unknown) => {
      errors.push(`network sweep: ${describeError(err)}`);
      return [] as string[];
    });
    const snapshots = this.#o.sweepSnapshots === undefined ? [] : await this.#o.sweepSnapshots().catch((err: unknown) => {
      errors.push(`snapshot sweep: ${describeError(err)}`);
      return [] as string[];
    });
    const result: SweepResult = { processes: counts.processesKilled + counts.strayProcessesKilled, supervisors: counts.supervisorsKilled, cgroups: counts.cgroupsRemoved, dirs, taps: taps.length, snapshots: snapshots.length, errors };
    if (result.processes + result.supervisors + result.cgroups + result.dirs + result.taps + result.snapshots > 0 || errors.length > 0) this.#o.logger.info(result, "swept leftovers of VMs no longer bound here");
    this.#o.onSwept?.(result);
    return result;
  }
}

/** Membership only: whether a uid is live at the moment of asking. */
export type LiveSet = Pick<ReadonlySet<string>, "has">;

/** A set whose membership is the live set at the moment of asking. */
class LiveUids extends Set<string> implements LiveSet {
  readonly #now: () => ReadonlySet<string>;
  constructor(now: () => ReadonlySet<string>) {
    super();
    this.#now = now;
  }
  override has(uid: string): boolean {
    return this.#now().has(uid);
  }
}
