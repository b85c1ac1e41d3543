import {
  RECONNECT_BACKOFF,
  backoffDelay,
  describeError,
  silentLogger,
  systemClock,
  type BackoffPolicy,
  type Clock,
  type Logger,
} from "../shared/index.ts";
import { isGone } from "./api-errors.ts";
import { deepFreeze, type DeepReadonly } from "./deep-readonly.ts";
import { asStored, keyOf, type KubeObject, type ObjectKey, type Stored } from "./resource.ts";
import type { ResourceClient, WatchEventType } from "./resource-client.ts";

/** What an informer hands out: a stored object (it has a name and uid), shared and frozen. */
export type Cached<T extends KubeObject> = DeepReadonly<Stored<T>>;

/**
 * Values an object is filed under in one index, e.g. `(vm) => [vm.status?.nodeName]`. Empty
 * strings and undefined are skipped, so objects without the field are simply not in the index.
 */
export type IndexFunc<T extends KubeObject> = (obj: Cached<T>) => Iterable<string | undefined>;

/** Indexes objects by the value of one label, e.g. `labelIndex("imp.dev/pool")`. */
export const labelIndex =
  (label: string): IndexFunc<KubeObject> =>
  (obj) => [obj.metadata?.labels?.[label]];

interface Index<T extends KubeObject> {
  readonly fn: IndexFunc<T>;
  readonly byValue: Map<string, Set<ObjectKey>>;
  readonly valuesOf: Map<ObjectKey, readonly string[]>;
}

/** Callbacks run synchronously on the informer's loop; keep them cheap (enqueue a key). */
export interface EventHandlers<T> {
  onAdd?(obj: T): void;
  /** Also called with `old === obj` on every resync. */
  onUpdate?(old: T, obj: T): void;
  /** `obj` is the last state the cache knew. */
  onDelete?(obj: T): void;
}

export interface InformerOptions<T extends KubeObject> {
  readonly client: Pick<ResourceClient<T>, "resource" | "list" | "watch">;
  readonly namespace?: string | undefined;
  readonly labelSelector?: string;
  readonly fieldSelector?: string;
  /** Re-deliver every cached object as an update this often; 0 disables. */
  readonly resyncPeriodMs?: number | undefined;
  /** Below client-node's 30 s inactivity timeout so the server ends quiet watches first. */
  readonly watchTimeoutSeconds?: number;
  readonly backoff?: BackoffPolicy;
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly random?: () => number;
}

export const DEFAULT_WATCH_TIMEOUT_SECONDS = 25;

/**
 * The cache never holds `metadata.managedFields`: nothing in Imp reads them, and on an object that
 * the operator, the agent and kubectl all write they are often larger than the rest of the object
 * (client-go's informers drop them the same way). Writes go through the API, which keeps them.
 */
function withoutManagedFields<T extends KubeObject>(obj: T): T {
  const meta = obj.metadata;
  if (meta === undefined || !("managedFields" in meta)) return obj;
  const { managedFields: _dropped, ...rest } = meta;
  return { ...obj, metadata: rest };
}

/** A clean watch end sooner than this, with no events, counts as a failure for backoff. */
const MIN_HEALTHY_WATCH_MS = 1_000;

/**
 * A list+watch cache of one kind: lists, then watches from the list's resourceVersion;
 * a watch that ends cleanly is resumed from the last version seen; a failed one is retried after
 * a backoff (1 s doubling to 30 s, reset by any event); `410 Gone` triggers a relist whose diff
 * against the cache is delivered as adds, updates and deletes, so nothing missed while
 * disconnected is lost. Imp owns this loop rather than client-node's informer (see ADR 0002).
 */
export class Informer<T extends KubeObject> {
  readonly #options: InformerOptions<T>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #cache = new Map<ObjectKey, Cached<T>>();
  readonly #indexes = new Map<string, Index<T>>();
  readonly #handlers = new Set<EventHandlers<Cached<T>>>();
  readonly #syncWaiters: Array<() => void> = [];
  #synced = false;
  #started = false;
  #resourceVersion = "";
  #lastEventAt: number | undefined;
  #watching = false;
  #failures = 0;
  readonly #stats = { lists: 0, watches: 0, failures: 0, expired: 0 };
  /** 410s since the last watch event: the first relists at once, repeats back off. */
  #goneInARow = 0;

  constructor(options: InformerOptions<T>) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ informer: options.client.resource.kind });
  }

  /** True once the first list has been delivered. Stays true through reconnects and relists. */
  hasSynced(): boolean {
    return this.#synced;
  }

  /** Resolves once synced; rejects with the signal's reason if it aborts first. */
  waitForSync(signal: AbortSignal): Promise<void> {
    if (this.#synced) return Promise.resolve();
    signal.throwIfAborted();
    return new Promise((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      this.#syncWaiters.push(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      });
    });
  }

  /**
   * Clock time of the last list, watch event, bookmark or clean (server-timed) watch end: the health
   * signal. A quiet but connected cache refreshes it at least every `watchTimeoutSeconds`, so "older
   * than a few of those" means the cache is not hearing from the API. Undefined before the first list.
   */
  lastEventAt(): number | undefined {
    return this.#lastEventAt;
  }

  /**
   * For health endpoints: `syncing` before the first list, `stale` when nothing was heard from the
   * API for `maxSilenceMs` (use a few watch timeouts, e.g. 3 × 25 s), `ok` otherwise.
   */
  health(maxSilenceMs: number): { readonly status: "syncing" | "ok" | "stale"; readonly silentForMs: number | undefined } {
    const last = this.#lastEventAt;
    if (!this.#synced || last === undefined) return { status: "syncing", silentForMs: undefined };
    const silentForMs = this.#clock.now() - last;
    return { status: silentForMs > maxSilenceMs ? "stale" : "ok", silentForMs };
  }

  /** Counters since start: list requests (the first and every relist), watch requests, failed list/watch attempts, 410s. */
  stats(): { readonly lists: number; readonly watches: number; readonly failures: number; readonly expired: number } {
    return { ...this.#stats };
  }

  /** Whether a watch stream is currently open. */
  isWatching(): boolean {
    return this.#watching;
  }

  /** The cached object: shared and frozen (edit a `structuredClone`). */
  get(key: ObjectKey): Cached<T> | undefined {
    return this.#cache.get(key);
  }

  /** All cached objects (a new array of shared, frozen objects). */
  list(): Cached<T>[] {
    return [...this.#cache.values()];
  }

  /**
   * Adds a secondary index kept up to date with the cache (client-go's `Indexer`), e.g.
   * `addIndex("byNode", (vm) => [vm.status?.nodeName])`. May be called before or after start.
   */
  addIndex(name: string, fn: IndexFunc<T>): this {
    if (this.#indexes.has(name)) throw new Error(`Cannot add index ${name}: it already exists`);
    const index: Index<T> = { fn, byValue: new Map(), valuesOf: new Map() };
    this.#indexes.set(name, index);
    for (const [key, obj] of this.#cache) this.#file(index, key, obj);
    return this;
  }

  /** Cached objects filed under `value` in index `name`, in key order. */
  byIndex(name: string, value: string): Cached<T>[] {
    return this.indexKeys(name, value).flatMap((key) => {
      const obj = this.#cache.get(key);
      return obj === undefined ? [] : [obj];
    });
  }

  /** Keys filed under `value` in index `name`, sorted (e.g. to enqueue them all). */
  indexKeys(name: string, value: string): ObjectKey[] {
    const index = this.#indexes.get(name);
    if (index === undefined) throw new Error(`Cannot read index ${name}: no such index`);
    return [...(index.byValue.get(value) ?? [])].sort();
  }

  /**
   * Registers handlers; if already synced, the current contents are delivered as adds first.
   * Returns a function that removes them.
   */
  addEventHandler(handlers: EventHandlers<Cached<T>>): () => void {
    this.#handlers.add(handlers);
    if (this.#synced) for (const obj of this.#cache.values()) this.#call(handlers, "onAdd", obj);
    return () => this.#handlers.delete(handlers);
  }

  /** Runs list+watch until `signal` aborts; resolves after the stream is closed. Callable once. */
  async start(signal: AbortSignal): Promise<void> {
    if (this.#started) throw new Error("Cannot start informer: already started");
    this.#started = true;
    await Promise.all([this.#runListWatch(signal), this.#runResync(signal)]);
  }

  async #runListWatch(signal: AbortSignal): Promise<void> {
    let needList = true;
    while (!signal.aborted) {
      let watchStartedAt = this.#clock.now();
      let sawEvent = false;
      try {
        if (needList) {
          await this.#relist(signal);
          needList = false;
          watchStartedAt = this.#clock.now();
        }
        this.#watching = true;
        this.#stats.watches += 1;
        await this.#options.client.watch(
          {
            namespace: this.#options.namespace,
            labelSelector: this.#options.labelSelector,
            fieldSelector: this.#options.fieldSelector,
            resourceVersion: this.#resourceVersion,
            timeoutSeconds: this.#options.watchTimeoutSeconds ?? DEFAULT_WATCH_TIMEOUT_SECONDS,
            signal,
          },
          (type, obj) => {
            sawEvent = true;
            this.#failures = 0;
            this.#goneInARow = 0;
            this.#apply(type, obj);
          },
        );
        this.#watching = false;
        // A server-side timeout is a healthy end: it proves the stream was alive until now.
        if (!signal.aborted) this.#lastEventAt = this.#clock.now();
        if (sawEvent || this.#clock.now() - watchStartedAt >= MIN_HEALTHY_WATCH_MS) continue;
        this.#logger.warn({ resourceVersion: this.#resourceVersion }, "watch ended at once without events");
      } catch (err) {
        this.#watching = false;
        if (signal.aborted) break;
        this.#stats.failures += 1;
        if (isGone(err)) {
          this.#stats.expired += 1;
          this.#logger.info({ resourceVersion: this.#resourceVersion }, "watch resourceVersion expired; relisting");
          needList = true;
          this.#goneInARow += 1;
          if (this.#goneInARow === 1) continue;
        } else {
          this.#logger.warn({ err: describeError(err), failures: this.#failures + 1 }, "list/watch failed");
        }
      }
      this.#failures += 1;
      const delay = backoffDelay(this.#options.backoff ?? RECONNECT_BACKOFF, this.#failures, this.#options.random);
      await this.#clock.sleep(delay, signal).catch(() => undefined); // abort ends the loop below
    }
    this.#watching = false;
  }

  async #relist(signal: AbortSignal): Promise<void> {
    this.#stats.lists += 1;
    const result = await this.#options.client.list({
      namespace: this.#options.namespace,
      labelSelector: this.#options.labelSelector,
      fieldSelector: this.#options.fieldSelector,
      signal,
    });
    const seen = new Set<ObjectKey>();
    for (const item of result.items) {
      const obj = deepFreeze(withoutManagedFields(item)) as Cached<T>;
      const key = keyOf(obj);
      seen.add(key);
      const old = this.#cache.get(key);
      this.#store(key, obj);
      if (old === undefined) this.#emit("onAdd", obj);
      else if (old.metadata?.resourceVersion !== obj.metadata?.resourceVersion) this.#emit("onUpdate", old, obj);
    }
    for (const [key, old] of this.#cache) {
      if (seen.has(key)) continue;
      this.#remove(key);
      this.#emit("onDelete", old);
    }
    this.#resourceVersion = result.resourceVersion;
    this.#lastEventAt = this.#clock.now();
    this.#failures = 0;
    if (!this.#synced) {
      this.#synced = true;
      for (const wake of this.#syncWaiters.splice(0)) wake();
    }
  }

  #apply(type: WatchEventType, item: T): void {
    this.#lastEventAt = this.#clock.now();
    const version = item.metadata?.resourceVersion;
    if (version !== undefined && version !== "") this.#resourceVersion = version;
    if (type === "BOOKMARK") return;
    let obj: Cached<T>;
    try {
      obj = deepFreeze(withoutManagedFields(asStored(item, this.#options.client.resource)));
    } catch (err) {
      // Throwing would end the watch and replay the same event forever; the object cannot be
      // filed without a name, so it is left out, loudly.
      this.#logger.error({ err: describeError(err), resourceVersion: version }, "watch event without a stored object's name or uid; skipped");
      return;
    }
    const key = keyOf(obj);
    const old = this.#cache.get(key);
    if (type === "DELETED") {
      this.#remove(key);
      this.#emit("onDelete", old ?? obj);
      return;
    }
    this.#store(key, obj);
    if (old === undefined) this.#emit("onAdd", obj);
    else this.#emit("onUpdate", old, obj);
  }

  async #runResync(signal: AbortSignal): Promise<void> {
    const period = this.#options.resyncPeriodMs ?? 0;
    if (period <= 0) return;
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(period, signal);
      } catch {
        return; // aborted
      }
      if (!this.#synced) continue;
      for (const obj of this.#cache.values()) this.#emit("onUpdate", obj, obj);
    }
  }

  #store(key: ObjectKey, obj: Cached<T>): void {
    this.#cache.set(key, obj);
    for (const index of this.#indexes.values()) {
      this.#unfile(index, key);
      this.#file(index, key, obj);
    }
  }

  #remove(key: ObjectKey): void {
    this.#cache.delete(key);
    for (const index of this.#indexes.values()) this.#unfile(index, key);
  }

  #file(index: Index<T>, key: ObjectKey, obj: Cached<T>): void {
    let values: string[];
    try {
      values = [...new Set(index.fn(obj))].filter((v): v is string => v !== undefined && v !== "");
    } catch (err) {
      // Like a handler bug: the object stays cached, only missing from this index; loudly logged.
      this.#logger.error({ err: describeError(err), key }, "index function threw");
      return;
    }
    index.valuesOf.set(key, values);
    for (const value of values) {
      let keys = index.byValue.get(value);
      if (keys === undefined) index.byValue.set(value, (keys = new Set()));
      keys.add(key);
    }
  }

  #unfile(index: Index<T>, key: ObjectKey): void {
    for (const value of index.valuesOf.get(key) ?? []) {
      const keys = index.byValue.get(value);
      keys?.delete(key);
      if (keys?.size === 0) index.byValue.delete(value);
    }
    index.valuesOf.delete(key);
  }

  #emit(which: "onAdd" | "onDelete", obj: Cached<T>): void;
  #emit(which: "onUpdate", old: Cached<T>, obj: Cached<T>): void;
  #emit(which: keyof EventHandlers<T>, a: Cached<T>, b?: Cached<T>): void {
    for (const handlers of this.#handlers) this.#call(handlers, which, a, b);
  }

  #call(handlers: EventHandlers<Cached<T>>, which: keyof EventHandlers<T>, a: Cached<T>, b?: Cached<T>): void {
    try {
      if (which === "onUpdate") handlers.onUpdate?.(a, b ?? a);
      else handlers[which]?.(a);
    } catch (err) {
      // A handler bug must not stop the cache; it is logged, never swallowed silently.
      this.#logger.error({ err: describeError(err), handler: which }, "event handler threw");
    }
  }
}
