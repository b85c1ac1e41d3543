import { describeError, retryableError, silentLogger, terminalError, type Logger } from "../shared/index.ts";
import { LeaderElector, type LeaderElectorOptions } from "./leader-elector.ts";

/** A long-lived part: `start` runs until `signal` aborts and resolves only once stopped. */
export interface Runnable {
  start(signal: AbortSignal): Promise<void>;
}

/** A cache the manager waits for before starting controllers. */
export interface SyncedRunnable extends Runnable {
  waitForSync(signal: AbortSignal): Promise<void>;
}

export interface ManagerOptions {
  readonly logger?: Logger;
  /** How long caches may take to sync before start fails. */
  readonly syncTimeoutMs?: number;
  /** When set, controllers run only while this process holds the Lease. */
  readonly leaderElection?: Omit<LeaderElectorOptions, "onStartedLeading" | "onStoppedLeading">;
}

export const DEFAULT_SYNC_TIMEOUT_MS = 120_000;

/**
 * Starts parts in groups and stops them in reverse (controller-runtime's runnable
 * groups): health servers → caches → wait for sync → controllers (leader-only when leader election
 * is on) → servers; on stop: servers → controllers → caches → health servers, each group fully
 * stopped before the next.
 * `start` resolves after a requested stop; it rejects after stopping everything if a part fails,
 * caches do not sync in time (retryable `CacheSyncTimeout`) or leadership is lost (terminal
 * `LeadershipLost`: exit the process and let a new one campaign, as controller-runtime does).
 */
export class Manager {
  readonly #options: ManagerOptions;
  readonly #logger: Logger;
  readonly #caches: SyncedRunnable[] = [];
  readonly #controllers: Runnable[] = [];
  readonly #servers: Runnable[] = [];
  readonly #healthServers: Runnable[] = [];
  #elector: LeaderElector | undefined;
  #started = false;

  constructor(options: ManagerOptions = {}) {
    this.#options = options;
    this.#logger = (options.logger ?? silentLogger).child({ part: "manager" });
  }

  addCache(cache: SyncedRunnable): this {
    this.#caches.push(cache);
    return this;
  }

  addController(controller: Runnable): this {
    this.#controllers.push(controller);
    return this;
  }

  /** Runnables that run on every replica, leader or not, once caches have synced. */
  addServer(server: Runnable): this {
    this.#servers.push(server);
    return this;
  }

  /**
   * Probe and metrics endpoints (`HealthServer`): started before the caches, so liveness and "not
   * ready yet" are answered while they sync, and stopped after everything else.
   */
  addHealthServer(server: Runnable): this {
    this.#healthServers.push(server);
    return this;
  }

  isLeader(): boolean {
    return this.#options.leaderElection === undefined ? this.#started : (this.#elector?.isLeader() ?? false);
  }

  async start(signal: AbortSignal): Promise<void> {
    if (this.#started) throw new Error("Cannot start manager: already started");
    this.#started = true;
    const stopping = new AbortController();
    let failure: unknown;
    const fail = (err: unknown): void => {
      if (failure === undefined && !stopping.signal.aborted) {
        failure = err;
        this.#logger.error({ err: describeError(err) }, "stopping after a failure");
      }
      stopping.abort();
    };
    const onAbort = (): void => stopping.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    if (signal.aborted) onAbort();

    const groups = {
      health: new AbortController(),
      caches: new AbortController(),
      controllers: new AbortController(),
      servers: new AbortController(),
    };
    const runAll = (parts: readonly Runnable[], groupSignal: AbortSignal, name: string): Promise<unknown> =>
      Promise.all(parts.map((p) => p.start(groupSignal).then(
        () => {
          if (!groupSignal.aborted) fail(terminalError("RunnableExited", `Cannot keep ${name} running: one stopped by itself`));
        },
        fail,
      )));

    const healthRun = runAll(this.#healthServers, groups.health.signal, "health servers");
    const cachesRun = runAll(this.#caches, groups.caches.signal, "caches");
    let controllersRun: Promise<unknown> = Promise.resolve();
    let serversRun: Promise<unknown> = Promise.resolve();
    if (await this.#waitForCaches(stopping.signal, fail)) {
      controllersRun = this.#startControllers(groups.controllers.signal, runAll, fail);
      serversRun = runAll(this.#servers, groups.servers.signal, "servers");
      this.#logger.info({ caches: this.#caches.length, controllers: this.#controllers.length, servers: this.#servers.length }, "started");
    }

    await new Promise<void>((resolve) => {
      if (stopping.signal.aborted) resolve();
      else stopping.signal.addEventListener("abort", () => resolve(), { once: true });
    });
    signal.removeEventListener("abort", onAbort);
    groups.servers.abort();
    await serversRun;
    groups.controllers.abort();
    await controllersRun;
    groups.caches.abort();
    await cachesRun;
    groups.health.abort();
    await healthRun;
    this.#logger.info("stopped");
    if (failure !== undefined) throw failure;
  }

  async #waitForCaches(stop: AbortSignal, fail: (err: unknown) => void): Promise<boolean> {
    const timeoutMs = this.#options.syncTimeoutMs ?? DEFAULT_SYNC_TIMEOUT_MS;
    const timeout = AbortSignal.timeout(timeoutMs);
    try {
      await Promise.all(this.#caches.map((c) => c.waitForSync(AbortSignal.any([stop, timeout]))));
      return true;
    } catch (err) {
      if (!stop.aborted) fail(retryableError("CacheSyncTimeout", `Cannot start controllers: caches not synced within ${timeoutMs} ms`, { cause: err }));
      return false;
    }
  }

  #startControllers(
    groupSignal: AbortSignal,
    runAll: (parts: readonly Runnable[], s: AbortSignal, name: string) => Promise<unknown>,
    fail: (err: unknown) => void,
  ): Promise<unknown> {
    const election = this.#options.leaderElection;
    if (election === undefined) return runAll(this.#controllers, groupSignal, "controllers");
    this.#elector = new LeaderElector({
      ...election,
      logger: election.logger ?? this.#logger,
      onStartedLeading: (leaderSignal) => runAll(this.#controllers, leaderSignal, "controllers").then(() => undefined),
      onStoppedLeading: (reason) => {
        if (reason === "lost") fail(terminalError("LeadershipLost", `Cannot keep leading ${election.namespace}/${election.name}: the lease could not be renewed`));
      },
    });
    // Resolves after leading ended; a loss is reported through onStoppedLeading above.
    return this.#elector.start(groupSignal).catch(fail);
  }
}
