/**
 * One scale-set listener per scale-set pool, on the leader only (the manager starts this with the
 * controllers): started when such a pool appears, restarted when its scale-set settings change,
 * stopped (its session closed) when the pool goes or is being deleted, or when leadership ends.
 * Keeps what each listener last said — the scale set's id, the session, the latest statistics, the
 * condition — for the pool controller, which is the only writer of the pool's status.
 */
import type { ImpVMRunnerPool } from "../../api/index.ts";
import type { JobMessage, ScaleSetStatistics } from "../../forge/index.ts";
import { keyOf, type Cached, type Informer, type Runnable } from "../../kube/index.ts";
import { describeError, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import type { ListenerTimings } from "./listener-table.ts";
import { ScaleSetListener, type ListenerClient, type ListenerSink, type ListenerSpec, type ListenerState } from "./scale-set-listener.ts";

export interface ScaleSetView extends ListenerState {
  readonly statistics: ScaleSetStatistics | undefined;
  /** When the statistics were last heard (a message, a session, or an empty poll's end). */
  readonly heardAt: number | undefined;
  /** The capacity the last poll told the service (X-ScaleSetMaxCapacity); undefined before the first poll. */
  readonly capacity: number | undefined;
}

/** What the listeners need of the rest of the operator. */
export interface ScaleSetListenersOptions {
  readonly poolCache: Informer<ImpVMRunnerPool>;
  readonly client: (pool: Readonly<ImpVMRunnerPool>, signal: AbortSignal) => Promise<ListenerClient>;
  /** A pool's view changed (demand, busy runners, condition): reconcile it. */
  readonly onChange: (poolKey: string) => void;
  /** JobStarted / JobCompleted of a pool's scale set (idempotent: a message may come again). */
  readonly onJob: (poolKey: string, job: JobMessage) => void;
  readonly onEvent: (pool: Cached<ImpVMRunnerPool>, type: "Normal" | "Warning", reason: string, message: string) => void;
  readonly ownerName: string;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly timings?: ListenerTimings;
  readonly faults?: FaultPoints;
  /**
   * How many jobs the pool can hold now (its placed VMs plus the cluster's room for more); undefined when
   * this operator cannot tell (no scheduler here), and then maxConcurrent is said.
   */
  readonly capacity?: (pool: Cached<ImpVMRunnerPool>) => number | undefined;
}

interface Running {
  readonly specKey: string;
  readonly abort: AbortController;
  readonly done: Promise<void>;
  readonly listener: ScaleSetListener;
}

/** Nudges coalesce for this long: a burst of VM events costs one look at the cluster's room per pool, and at most a few polls a second. */
const NUDGE_COALESCE_MS = 250;

export class ScaleSetListeners implements Runnable {
  readonly #o: ScaleSetListenersOptions;
  readonly #running = new Map<string, Running>();
  readonly #views = new Map<string, ScaleSetView>();
  #signal: AbortSignal | undefined;
  #nudgeTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: ScaleSetListenersOptions) {
    this.#o = options;
  }

  /**
   * The cluster's room may have changed (a VM was created, ended or deleted, a node joined or was
   * cordoned or uncordoned): each listener whose poll told the service another capacity than its
   * pool can hold now polls again at once.
   */
  roomMayHaveChanged(): void {
    if (this.#nudgeTimer !== undefined || this.#running.size === 0) return;
    this.#nudgeTimer = setTimeout(() => {
      this.#nudgeTimer = undefined;
      for (const r of this.#running.values()) r.listener.nudge();
    }, NUDGE_COALESCE_MS);
    this.#nudgeTimer.unref();
  }

  /** The pool's scale set as its listener last reported it; undefined before the listener said anything. */
  view(poolKey: string): ScaleSetView | undefined {
    return this.#views.get(poolKey);
  }

  /**
   * Each pool with a listener here (`namespace/name`), and whether it hears its jobs now: a session
   * held and the last step a success (reason Listening). A listener that keeps its session while its
   * polls fail (the Actions service down, credentials refused) hears nothing either.
   */
  *sessions(): Iterable<readonly [string, boolean]> {
    for (const key of this.#running.keys()) {
      const view = this.#views.get(key);
      yield [key, view !== undefined && view.sessionId !== undefined && view.reason === "Listening" && (view.phase === "Polling" || view.phase === "Refreshing")];
    }
  }

  async start(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    const sync = (): void => this.#sync();
    const unsubscribe = this.#o.poolCache.addEventHandler({ onAdd: sync, onUpdate: sync, onDelete: sync });
    this.#sync();
    await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    unsubscribe();
    await Promise.all([...this.#running.values()].map((r) => (r.abort.abort(), r.done)));
    this.#running.clear();
  }

  #sync(): void {
    const signal = this.#signal;
    if (signal === undefined || signal.aborted) return;
    const wanted = new Map<string, { pool: Cached<ImpVMRunnerPool>; spec: ListenerSpec }>();
    for (const pool of this.#o.poolCache.list()) {
      const gh = pool.spec.github;
      const scaleSet = gh?.scaleSet;
      if (gh === undefined || scaleSet === undefined || pool.metadata.deletionTimestamp !== undefined) continue;
      const key = keyOf(pool);
      wanted.set(key, {
        pool,
        spec: {
          poolKey: key,
          scaleSetName: scaleSet.name,
          runnerGroup: gh.runnerGroup,
          labels: [...gh.labels],
          maxCapacity: pool.spec.maxConcurrent,
          recordedSessionId: pool.status?.scaleSet?.name === scaleSet.name ? pool.status.scaleSet.sessionId : undefined,
        },
      });
    }
    for (const [key, running] of this.#running) {
      const want = wanted.get(key);
      if (want !== undefined && specKeyOf(want.spec) === running.specKey) continue;
      running.abort.abort();
      this.#running.delete(key);
      if (want === undefined) void running.done.then(() => this.#views.delete(key));
    }
    for (const [key, { pool, spec }] of wanted) {
      if (this.#running.has(key)) continue;
      const previous = [...this.#running.values()];
      const abort = new AbortController();
      signal.addEventListener("abort", () => abort.abort(), { once: true });
      const listener = new ScaleSetListener({
        spec,
        client: (s) => this.#o.client((this.#o.poolCache.get(key) ?? pool) as Readonly<ImpVMRunnerPool>, s),
        sink: this.#sink(pool),
        ownerName: this.#o.ownerName,
        logger: this.#o.logger.child({ pool: key, scaleSet: spec.scaleSetName }),
        ...(this.#o.clock === undefined ? {} : { clock: this.#o.clock }),
        ...(this.#o.timings === undefined ? {} : { timings: this.#o.timings }),
        ...(this.#o.faults === undefined ? {} : { faults: this.#o.faults }),
        capacity: () => {
          const current = this.#o.poolCache.get(key);
          return current === undefined ? undefined : this.#o.capacity?.(current);
        },
      });
      // A restarted listener waits for its predecessor to close its session, or it would meet a 409.
      const done = Promise.all(previous.filter((p) => p.abort.signal.aborted).map((p) => p.done))
        .then(() => listener.run(abort.signal))
        .catch((err: unknown) => this.#o.logger.error({ pool: key, err: describeError(err) }, "scale-set listener ended unexpectedly"));
      this.#running.set(key, { specKey: specKeyOf(spec), abort, done, listener });
    }
  }

  #sink(pool: Cached<ImpVMRunnerPool>): ListenerSink {
    const clock = this.#o.clock;
    return {
      statistics: (key, statistics) => {
        const view = this.#views.get(key);
        const changed = view?.statistics === undefined || JSON.stringify(view.statistics) !== JSON.stringify(statistics);
        this.#views.set(key, { ...(view ?? emptyView()), statistics, heardAt: clock?.now() ?? Date.now() });
        if (changed) this.#o.onChange(key);
      },
      job: (key, job) => this.#o.onJob(key, job),
      capacity: (key, capacity) => {
        const view = this.#views.get(key);
        if (view?.capacity === capacity) return;
        this.#views.set(key, { ...(view ?? emptyView()), capacity });
        this.#o.onChange(key);
      },
      state: (key, state) => {
        const view = this.#views.get(key);
        this.#views.set(key, { ...(view ?? emptyView()), ...state });
        this.#o.onChange(key);
      },
      event: (key, type, reason, message) => this.#o.onEvent(this.#o.poolCache.get(key) ?? pool, type, reason, message),
    };
  }
}

function emptyView(): ScaleSetView {
  return { phase: "Resolving", reason: "Starting", message: "", scaleSetId: undefined, sessionId: undefined, statistics: undefined, heardAt: undefined, capacity: undefined };
}

/** What, if changed, restarts a pool's listener (the recorded session is read once, at start). */
function specKeyOf(spec: ListenerSpec): string {
  return JSON.stringify([spec.scaleSetName, spec.runnerGroup, spec.labels, spec.maxCapacity]);
}
