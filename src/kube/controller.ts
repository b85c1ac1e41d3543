import { randomUUID } from "node:crypto";
import type { Registry } from "prom-client";
import { describeError, retryableError, silentLogger, systemClock, type BackoffPolicy, type Clock, type Logger } from "../shared/index.ts";
import { controllerMetrics, type ControllerMetrics } from "./controller-metrics.ts";
import type { DeepReadonly } from "./deep-readonly.ts";
import type { EventHandlers } from "./informer.ts";
import { decideRequeue, type ReconcileAttempt, type ReconcileResult } from "./reconcile-result.ts";
import { keyOf, type KubeObject, type ObjectKey } from "./resource.ts";
import type { RateLimit } from "./token-bucket.ts";
import { WorkQueue } from "./work-queue.ts";

/** Everything one reconcile gets. `logger` is bound to {controller, key, reconcileID}. */
export interface ReconcileContext {
  readonly key: ObjectKey;
  readonly reconcileID: string;
  readonly logger: Logger;
  /**
   * Aborts when the controller stops or this reconcile passes its deadline (`reconcileTimeoutMs`;
   * the reason is then a retryable `ReconcileTimeout`). Pass it to every API call.
   */
  readonly signal: AbortSignal;
  /** Failures of this key since its last success (0 on a first try). */
  readonly failures: number;
}

/** Level-based: reads the world for `ctx.key` and converges it; returns or throws a classified error. */
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
export const generationChanged = (old: DeepReadonly<KubeObject>, obj: DeepReadonly<KubeObject>): boolean =>
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
  /** Deadline of one reconcile; past it the reconcile's signal aborts and it counts as an error. */
  readonly reconcileTimeoutMs?: number;
  /** After stop, how long `start` waits for in-flight reconciles before returning without them. */
  readonly stopTimeoutMs?: number;
}

export const DEFAULT_WORKERS = 2;
/** Reconcilers never sleep (they requeue), so a minute means one is stuck on something. */
export const DEFAULT_RECONCILE_TIMEOUT_MS = 60_000;
/**
 * A leader that cannot renew stops its controllers 2.2 s before anyone may take over (with
 * `DEFAULT_LEADER_ELECTION`), and that stop must be over by then: a reconcile gets at most this
 * long to notice its aborted signal, 7.8 + 2 = 9.8 s < 10 s.
 */
export const DEFAULT_STOP_TIMEOUT_MS = 2_000;

type Outcome = ReconcileAttempt & { readonly finished: boolean };

/** Settles never: stands in for a timer that was cancelled, in a `Promise.race`. */
const never = new Promise<never>(() => undefined);

/**
 * A work-queue-driven reconcile loop. Watch events only enqueue keys; N
 * workers reconcile distinct keys; the result or the error's class decides the requeue
 * (`decideRequeue`). Enqueueing before `start` is allowed (keys wait); after stop it is a no-op.
 *
 * A reconcile that ignores its signal must not wedge a key or the shutdown: each one runs against a
 * deadline; at the deadline its signal aborts, the attempt counts as a retryable error (backoff)
 * and the key is released at once, whether or not the reconcile's promise ever settles. Its late
 * writes are harmless as far as the API allows: every call given `ctx.signal` now fails at once,
 * and a write carrying the resourceVersion it read is refused as a conflict once the next
 * reconcile has written. (Only a process exit stops code that ignores both.) The same happens
 * to every in-flight reconcile `stopTimeoutMs` after stop, so `start(signal)` resolves within that
 * bound after `signal` aborts.
 */
export class Controller {
  readonly name: string;
  readonly #options: ControllerOptions;
  readonly #queue: WorkQueue;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #metrics: ControllerMetrics;
  readonly #reconcileTimeoutMs: number;
  readonly #stopTimeoutMs: number;
  #started = false;
  #abandoned = 0;

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
    this.#reconcileTimeoutMs = options.reconcileTimeoutMs ?? DEFAULT_RECONCILE_TIMEOUT_MS;
    this.#stopTimeoutMs = options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
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
  watch<T extends DeepReadonly<KubeObject>>(source: EventSource<T>, options: WatchMapping<T> = {}): () => void {
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

  /** Reconciles given up on (deadline or stop) whose promise had not settled yet; for tests and health. */
  get abandonedReconciles(): number {
    return this.#abandoned;
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

  async #reconcileOne(key: ObjectKey, stop: AbortSignal): Promise<void> {
    const reconcileID = randomUUID();
    const logger = this.#logger.child({ key, reconcileID });
    const started = this.#clock.now();
    const own = new AbortController();
    const timers = new AbortController();
    const signal = AbortSignal.any([stop, own.signal]);
    const settled = this.#run({ key, reconcileID, logger, signal, failures: this.#queue.numRequeues(key) });
    const deadline = this.#clock.sleep(this.#reconcileTimeoutMs, timers.signal).then(
      (): Outcome => ({
        finished: false,
        ok: false,
        error: retryableError("ReconcileTimeout", `Cannot reconcile ${this.name} ${key}: no result within ${this.#reconcileTimeoutMs} ms`, {
          context: { controller: this.name, key },
        }),
      }),
      () => never,
    );
    const abandonedOnStop = this.#afterStop(stop, timers.signal).then(
      (): Outcome => ({
        finished: false,
        ok: false,
        error: retryableError("ReconcileAbandoned", `Cannot finish reconciling ${this.name} ${key}: still running ${this.#stopTimeoutMs} ms after stop`),
      }),
    );
    const { finished, ...attempt } = await Promise.race([settled.then((a): Outcome => ({ ...a, finished: true })), deadline, abandonedOnStop]);
    timers.abort();
    if (!finished) {
      // The key is released below while this promise may still run; it must not hold the key.
      own.abort(attempt.ok ? undefined : attempt.error);
      this.#abandoned += 1;
      void settled.then(() => (this.#abandoned -= 1));
      logger.warn({ err: attempt.ok ? undefined : describeError(attempt.error) }, "reconcile abandoned: signal aborted, key released");
    }
    const { outcome, action } = decideRequeue(attempt);
    this.#metrics.reconcileDuration.labels(this.name).observe((this.#clock.now() - started) / 1_000);
    this.#metrics.reconcileTotal.labels(this.name, outcome).inc();

    if (!attempt.ok) {
      const fields = { err: describeError(attempt.error), outcome, failures: this.#queue.numRequeues(key) };
      if (outcome === "terminal") logger.error(fields, "reconcile failed terminally; not retrying");
      else if (outcome === "conflict") logger.info(fields, "reconcile hit a conflict mutateWithRetry could not absorb; retrying with backoff");
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
      case "addRateLimited":
        this.#queue.addRateLimited(key);
        return;
    }
  }

  /** The reconcile as an attempt; never rejects (a synchronous throw is a failed attempt too). */
  async #run(ctx: ReconcileContext): Promise<ReconcileAttempt> {
    try {
      return { ok: true, result: await this.#options.reconcile(ctx) };
    } catch (error) {
      return { ok: false, error };
    }
  }

  /** Resolves `stopTimeoutMs` after `stop` aborts; never, if `cancel` aborts first. */
  #afterStop(stop: AbortSignal, cancel: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const onStop = (): void => {
        this.#clock.sleep(this.#stopTimeoutMs, cancel).then(resolve, () => undefined);
      };
      if (stop.aborted) onStop();
      else {
        stop.addEventListener("abort", onStop, { once: true });
        cancel.addEventListener("abort", () => stop.removeEventListener("abort", onStop), { once: true });
      }
    });
  }
}

/**
 * Maps a child object to the keys of its owners of `ownerKind`, in the child's namespace
 * (owners of namespaced children live in the same namespace or are cluster-scoped).
 */
export function ownerKeys(ownerKind: string, ownerNamespaced = true): (obj: DeepReadonly<KubeObject>) => ObjectKey[] {
  return (obj) =>
    (obj.metadata?.ownerReferences ?? [])
      .filter((ref) => ref["kind"] === ownerKind && typeof ref["name"] === "string")
      .map((ref) => {
        const name = ref["name"] as string;
        const namespace = obj.metadata?.namespace;
        return ownerNamespaced && namespace !== undefined && namespace !== "" ? `${namespace}/${name}` : name;
      });
}
