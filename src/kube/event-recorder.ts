import { describeError, silentLogger, systemClock, type Clock, type Logger } from "../shared/index.ts";
import { isNotFound } from "./api-errors.ts";
import type { KubeObject, ResourceDescriptor } from "./resource.ts";
import type { ResourceClient } from "./resource-client.ts";

export const EVENT_RESOURCE: ResourceDescriptor = { group: "", version: "v1", plural: "events", kind: "Event", namespaced: true };

export type EventType = "Normal" | "Warning";

/** core/v1 Event, the fields Imp writes. */
export interface CoreEvent extends KubeObject {
  involvedObject: { apiVersion?: string; kind?: string; name?: string; namespace?: string; uid?: string };
  reason: string;
  message: string;
  type: EventType;
  count: number;
  firstTimestamp: string;
  lastTimestamp: string;
  source: { component: string; host?: string };
  reportingComponent: string;
  reportingInstance: string;
}

interface SeenEvent {
  readonly name: string;
  readonly namespace: string;
  readonly count: number;
  readonly firstTimestamp: string;
}

export type EventWrite = { readonly kind: "create" } | { readonly kind: "bump"; readonly seen: SeenEvent };

/** Same object, type, reason and message: a repeat that only bumps `count` (client-go's aggregation key). */
export function eventKey(involved: InvolvedObject, event: Pick<EventToRecord, "type" | "reason" | "message">): string {
  const m = involved.metadata;
  return [involved.kind ?? "", m.namespace ?? "", m.name, m.uid, event.type, event.reason, event.message].join("\u0000");
}

/** Pure: a repeat of a recorded event is a bump of its count, anything else a new Event. */
export function decideEventWrite(seen: SeenEvent | undefined): EventWrite {
  return seen === undefined ? { kind: "create" } : { kind: "bump", seen };
}

export interface EventToRecord {
  readonly type: EventType;
  /** UpperCamelCase, machine-readable: `Scheduled`, `BootFailed`. */
  readonly reason: string;
  /** Human-readable; cut at 1 024 characters. Never secrets. */
  readonly message: string;
  readonly signal?: AbortSignal;
}

export interface EventRecorderOptions {
  readonly client: Pick<ResourceClient<CoreEvent>, "create" | "patch">;
  /** `source.component` / `reportingComponent`, e.g. `imp-operator`. */
  readonly component: string;
  /** `reportingInstance` and `source.host`, e.g. the pod or node name. */
  readonly instance: string;
  /** Remembered distinct events for de-duplication (oldest forgotten first). */
  readonly cacheSize?: number;
  readonly clock?: Clock;
  readonly logger?: Logger;
}

/** What an Event is about: an object as stored (the API server gave it its name and uid). */
export interface InvolvedObject {
  readonly apiVersion?: string | undefined;
  readonly kind?: string | undefined;
  readonly metadata: { readonly name: string; readonly namespace?: string | undefined; readonly uid: string };
}

/**
 * Writes core/v1 Events about objects, folding repeats into one Event whose `count` and
 * `lastTimestamp` grow (as `kubectl describe` shows "x5 over 2m"). Best effort by design: `record`
 * never throws (an event must not fail a reconcile) and logs what it could not write. Concurrent
 * repeats of one event may create two Events; that costs a line in `describe`, not correctness.
 */
export class EventRecorder {
  readonly #options: EventRecorderOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #seen = new Map<string, SeenEvent>();

  constructor(options: EventRecorderOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ component: options.component });
  }

  /** Records `event` about `involved`, a stored object (kind, name, uid and, if namespaced, namespace). */
  async record(involved: InvolvedObject, event: EventToRecord): Promise<void> {
    const { type, reason, message, signal } = event;
    const key = eventKey(involved, event);
    const now = new Date(this.#clock.now()).toISOString().replace(/\.\d{3}Z$/, "Z");
    const write = decideEventWrite(this.#seen.get(key));
    try {
      if (write.kind === "bump") {
        const count = write.seen.count + 1;
        try {
          await this.#options.client.patch({ namespace: write.seen.namespace, name: write.seen.name }, { count, lastTimestamp: now }, signal);
          this.#remember(key, { ...write.seen, count });
          return;
        } catch (err) {
          if (!isNotFound(err)) throw err; // expired (events live ~1 h): start a new one
        }
      }
      const namespace = involved.metadata.namespace || "default";
      const created = await this.#options.client.create(
        {
          metadata: { namespace, name: `${involved.metadata.name}.${this.#clock.now().toString(16)}${Math.floor(Math.random() * 0xffff).toString(16)}` },
          involvedObject: {
            ...(involved.apiVersion === undefined ? {} : { apiVersion: involved.apiVersion }),
            ...(involved.kind === undefined ? {} : { kind: involved.kind }),
            name: involved.metadata.name,
            ...(involved.metadata.namespace === undefined ? {} : { namespace: involved.metadata.namespace }),
            uid: involved.metadata.uid,
          },
          reason,
          message: message.slice(0, 1024),
          type,
          count: 1,
          firstTimestamp: now,
          lastTimestamp: now,
          source: { component: this.#options.component, host: this.#options.instance },
          reportingComponent: this.#options.component,
          reportingInstance: this.#options.instance,
        },
        signal,
      );
      this.#remember(key, { name: created.metadata.name, namespace, count: 1, firstTimestamp: now });
    } catch (err) {
      this.#logger.warn({ err: describeError(err), reason, object: `${involved.kind ?? ""} ${involved.metadata.name}` }, "could not record event");
    }
  }

  #remember(key: string, seen: SeenEvent): void {
    this.#seen.delete(key); // re-insert: Map order is the LRU order
    this.#seen.set(key, seen);
    const limit = this.#options.cacheSize ?? 4_096;
    while (this.#seen.size > limit) {
      const oldest = this.#seen.keys().next().value;
      if (oldest === undefined) break;
      this.#seen.delete(oldest);
    }
  }
}
