import { randomUUID } from "node:crypto";
import type { Registry } from "prom-client";
import { describeError, silentLogger, systemClock, type BackoffPolicy, type Clock, type Logger } from "../shared/index.ts";
import { controllerMetrics, type ControllerMetrics } from "./controller-metrics.ts";
import type { EventHandlers } from "./informer.ts";
import { decideRequeue, type ReconcileAttempt, type ReconcileResult } from "./reconcile-result.ts";
import { keyOf, type KubeObject, type ObjectKey } from "./resource.ts";
import type { RateLimit } from "./token-bucket.ts";
import { WorkQueue } from "./work-queue.ts";

/** Everything one reconcile gets. `logger` is bound to {controller, key, reconcileID} (STYLE 33). */
export interface ReconcileContext {
  readonly key: ObjectKey;
  readonly reconcileID: string;
  readonly logger: Logger;
  /** Aborts when the controller stops; pass it to every API call. */
  readonly signal: AbortSignal;
  /** Failures of this key since its last success (0 on a first try). */
  readonly failures: number;
}

/** Level-based (STYLE 8): reads the world for `ctx.key` and converges it; returns or throws a classified error. */
export type Reconciler = (ctx: ReconcileContext) => Promise<ReconcileResult>;

/** Anything that delivers object events: an `Informer`, or a test double. */
export interface EventSource<T> {
  addEventHandler(handlers: EventHandlers<T>): () => void;
}

export interface WatchMapping<T> {
  readonly toKeys?: (obj: T) => Iterable<ObjectKey>;
  readonly updateMatters?: (old: T, obj: T) => boolean;
}

/** An update predicate: only spec changes (metadata.generation) matter; status-only writes are ignored. */
export const generationChanged = (old: KubeObject, obj: KubeObject): boolean =>
  old.metadata?.generation === undefined || old.metadata.generation !== obj.metadata?.generation;

export interface ControllerOptions {
  readonly name: string;
  readonly reconcile: Reconciler;
  /** Prometheus registry the metrics are pre-registered on. */
  readonly registry: Registry;
  /** Concurrent reconciles (of different keys). */
  readonly workers?: number;
  readonly logger?: Logger;
  readonly clock?: Clock;
  readonly backoff?: BackoffPolicy;
  /** Overall limit on failure retries across keys (`WorkQueue`); default 10 qps, burst 100. */
  readonly rateLimit?: RateLimit;
}

export const DEFAULT_WORKERS = 2;

/**
 * A work-queue-driven reconcile loop (STYLE 7, 10, 31, 33). Watch events only enqueue keys; N
 * workers reconcile distinct keys; the result or the error's class decides the requeue
 * (`decideRequeue`). `start(signal)` resolves after the queue is shut down and in-flight reconciles
 * have returned. Enqueueing before `start` is allowed (keys wait); after stop it is a no-op.
 */
export class Controller {
  readonly name: string;
  readonly #options: ControllerOptions;
  readonly #queue: WorkQueue;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #metrics: ControllerMetrics;
  readonly #conflictsInARow = new Map<ObjectKey, number>();
  #started = false;

  constructor(options: ControllerOptions) {
    this.name = options.name;
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#queue = new WorkQueue({
      clock: this.#clock,
      ...(options.backoff === undefined ? {} : { backoff: options.backoff }),
      ...(options.rateLimit === undefined ? {} : { rateLimit: options.rateLimit }),
    });
    this.#logger = (options.logger ?? silentLogger).child({ controller: options.name });
    this.#metrics = controllerMetrics(options.registry, { controller: options.name, depth: () => this.#queue.length });
  }

  enqueue(key: ObjectKey): void {
    this.#queue.add(key);
  }

  enqueueAfter(key: ObjectKey, ms: number): void {
    this.#queue.addAfter(key, ms);
  }

  /**
   * Enqueues keys for every add/update/delete from `source`. Returns an unsubscribe.
   * - `toKeys` maps an object to the keys to reconcile (default: its own key; `ownerKeys(kind)` for children);
   * - `updateMatters(old, obj)` filters updates, e.g. `generationChanged` to ignore status-only writes
   *   (resyncs, where `old === obj`, always pass so periodic re-checks still happen).
   */
  watch<T extends KubeObject>(source: EventSource<T>, options: WatchMapping<T> = {}): () => void {
    const toKeys = options.toKeys ?? ((o: T) => [keyOf(o)]);
    const enqueueAll = (obj: T): void => {
      for (const key of toKeys(obj)) this.#queue.add(key);
    };
    const onUpdate = (old: T, obj: T): void => {
      if (old === obj || (options.updateMatters?.(old, obj) ?? true)) enqueueAll(obj);
    };
    return source.addEventHandler({ onAdd: enqueueAll, onUpdate, onDelete: enqueueAll });
  }

  /** Keys ready now (the queue-depth metric), for health and tests. */
  get queueLength(): number {
    return this.#queue.length;
  }

  async start(signal: AbortSignal): Promise<void> {
    if (this.#started) throw new Error(`Cannot start controller ${this.name}: already started`);
    this.#started = true;
    const workers = Math.max(1, this.#options.workers ?? DEFAULT_WORKERS);
    const onAbort = (): void => this.#queue.shutDown();
    if (signal.aborted) onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    this.#logger.info({ workers }, "controller started");
    try {
      await Promise.all(Array.from({ length: workers }, () => this.#work(signal)));
      await this.#queue.drained();
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#logger.info("controller stopped");
    }
  }

  async #work(signal: AbortSignal): Promise<void> {
    for (;;) {
      const key = await this.#queue.get();
      if (key === undefined) return;
      try {
        await this.#reconcileOne(key, signal);
      } finally {
        this.#queue.done(key);
      }
    }
  }

  async #reconcileOne(key: ObjectKey, signal: AbortSignal): Promise<void> {
    const reconcileID = randomUUID();
    const logger = this.#logger.child({ key, reconcileID });
    const started = this.#clock.now();
    let attempt: ReconcileAttempt;
    try {
      attempt = { ok: true, result: await this.#options.reconcile({ key, reconcileID, logger, signal, failures: this.#queue.numRequeues(key) }) };
    } catch (error) {
      attempt = { ok: false, error };
    }
    const conflicts = this.#conflictsInARow.get(key) ?? 0;
    const { outcome, action } = decideRequeue(attempt, conflicts);
    this.#metrics.reconcileDuration.labels(this.name).observe((this.#clock.now() - started) / 1_000);
    this.#metrics.reconcileTotal.labels(this.name, outcome).inc();
    if (outcome === "conflict") this.#conflictsInARow.set(key, conflicts + 1);
    else this.#conflictsInARow.delete(key);

    if (!attempt.ok) {
      const fields = { err: describeError(attempt.error), outcome, failures: this.#queue.numRequeues(key) };
      if (outcome === "terminal") logger.error(fields, "reconcile failed terminally; not retrying");
      else if (outcome === "conflict") logger.debug(fields, "reconcile hit a conflict; retrying");
      else logger.warn(fields, "reconcile failed; retrying with backoff");
    }
    switch (action.kind) {
      case "forget":
        this.#queue.forget(key);
        return;
      case "forgetAndAddAfter":
        this.#queue.forget(key);
        this.#queue.addAfter(key, action.ms);
        return;
      case "addNow":
        this.#queue.add(key);
        return;
      case "addRateLimited":
        this.#queue.addRateLimited(key);
        return;
    }
  }
}

/**
 * Maps a child object to the keys of its owners of `ownerKind` (STYLE 9), in the child's namespace
 * (owners of namespaced children live in the same namespace or are cluster-scoped).
 */
export function ownerKeys(ownerKind: string, ownerNamespaced = true): (obj: KubeObject) => ObjectKey[] {
  return (obj) =>
    (obj.metadata?.ownerReferences ?? [])
      .filter((ref) => ref["kind"] === ownerKind && typeof ref["name"] === "string")
      .map((ref) => {
        const name = ref["name"] as string;
        const namespace = obj.metadata?.namespace;
        return ownerNamespaced && namespace !== undefined && namespace !== "" ? `${namespace}/${name}` : name;
      });
}
