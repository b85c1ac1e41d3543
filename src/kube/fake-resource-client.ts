import { randomUUID } from "node:crypto";
import { conflictError, retryableError, systemClock, terminalError, type Clock, type ImpError } from "../shared/index.ts";
import { KubeErrorCode } from "./api-errors.ts";
import { applyMergePatch, jsonEqual } from "./merge-patch.ts";
import { apiVersionOf, describeObject, keyOf, type KubeObject, type ObjectMeta, type ResourceDescriptor, type Stored } from "./resource.ts";
import type {
  DeleteOptions,
  ListOptions,
  ListResult,
  MergePatch,
  ObjectRef,
  ResourceClient,
  WatchEventType,
  WatchOptions,
} from "./resource-client.ts";
import { matchesFields, matchesLabels, parseFieldSelector, parseLabelSelector } from "./selectors.ts";

type Method = "get" | "list" | "create" | "delete" | "patch" | "patchStatus" | "watch";

interface Change<T> {
  readonly version: number;
  readonly type: Exclude<WatchEventType, "BOOKMARK">;
  /** The object before the change (undefined for ADDED): selectors turn updates into ADDED/DELETED. */
  readonly prev: T | undefined;
  readonly obj: T;
}

interface OpenWatch {
  readonly push: (change: Change<KubeObject>) => void;
  readonly end: (err?: ImpError) => void;
}

/** Reads one selectable field of an object; undefined counts as "" as on the API server. */
export type FieldExtractor<T> = (obj: T) => string | undefined;

export interface FakeResourceClientOptions<T> {
  /**
   * Field-selector fields beyond `metadata.name` and `metadata.namespace`, e.g. a CRD's
   * `selectableFields`: `{ "status.nodeName": (vm) => vm.status?.nodeName }`. Selecting on any other
   * field fails with BadRequest, as on the API server.
   */
  readonly fields?: Readonly<Record<string, FieldExtractor<T>>>;
  /** creationTimestamp and deletionTimestamp come from it. */
  readonly clock?: Clock;
  /** For generateName suffixes. */
  readonly random?: () => number;
}

/** The API server's generateName alphabet (no vowels, no 0/1/3: no words, no look-alikes), 5 characters. */
const NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789";
const GENERATED_SUFFIX_LENGTH = 5;
/** The API server's retries for a generated name that is taken (RetryGenerateName), plus the first try. */
const GENERATE_NAME_ATTEMPTS = 8;

/**
 * An in-memory API server for one kind that honours the `ResourceClient` contract where Imp's
 * controllers rely on it, and is proven against the real kube-apiserver by the same table of cases
 * (test/integration/kube/fake-parity.test.ts):
 * - create: uid, creationTimestamp, generation 1, increasing resourceVersion; `generateName` gets
 *   5 random characters; status is dropped (kinds with a status subresource); AlreadyExists;
 * - patch (JSON merge): the main resource ignores status, `patchStatus` writes only status; a
 *   `metadata.resourceVersion` in the patch is a precondition (Conflict when stale); a patch that
 *   changes nothing is not a write (same resourceVersion, no event); metadata.generation is bumped
 *   when anything outside metadata and status changes;
 * - delete: without finalizers removes the object; with finalizers sets deletionTimestamp (and
 *   bumps generation) and keeps it until a patch removes the last finalizer, which deletes it; no
 *   finalizer may be added while deleting; a uid precondition;
 * - list and watch with namespace, label selectors (=, ==, !=, in, notin, exists, !exists) and
 *   field selectors (metadata.name, metadata.namespace, plus `fields`); a watch sees an object that
 *   starts or stops matching as ADDED or DELETED; watches resume from a resourceVersion and fail
 *   with Gone after `compact()`.
 * Not modelled (where a test needs these, it uses the real API server): managedFields, server-side
 * apply, schema validation, defaulting and CEL rules, admission, ownerReference garbage collection,
 * paging (`limit`/`continue`), bookmarks, resourceVersion semantics of list (always "most recent"),
 * numeric label operators and escaped field values; kinds without generation (ConfigMap, whose
 * generation the real server leaves unset, gets one here).
 * Fault hooks (`failNext`, `dropWatches`, `compact`) let tests break it on purpose.
 */
export class FakeResourceClient<T extends KubeObject> implements ResourceClient<T> {
  readonly resource: ResourceDescriptor;
  #version = 0;
  #oldestWatchable = 0;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #fields: ReadonlyMap<string, FieldExtractor<T>>;
  readonly #objects = new Map<string, Stored<T>>();
  readonly #log: Array<Change<Stored<T>>> = [];
  readonly #watches = new Set<OpenWatch>();
  readonly #faults: Array<{ method: Method; error: ImpError }> = [];
  /** Calls per method, for tests that need to know a path was taken (prefer asserting state). */
  readonly calls: Record<Method, number> = { get: 0, list: 0, create: 0, delete: 0, patch: 0, patchStatus: 0, watch: 0 };

  constructor(resource: ResourceDescriptor, options: FakeResourceClientOptions<T> = {}) {
    this.resource = resource;
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#fields = new Map<string, FieldExtractor<T>>([
      ["metadata.name", (o) => o.metadata?.name],
      ["metadata.namespace", (o) => o.metadata?.namespace],
      ...Object.entries(options.fields ?? {}),
    ]);
  }

  /** The next call of `method` fails with `error` (queue several to fail several calls). */
  failNext(method: Method, error: ImpError): void {
    this.#faults.push({ method, error });
  }

  /** Ends every open watch with `error` (or cleanly), as a dropped connection or server timeout would. */
  dropWatches(error?: ImpError): void {
    for (const watch of [...this.#watches]) watch.end(error);
  }

  /** Forgets history: watches from any version before now fail with `Gone`, as after etcd compaction. */
  compact(): void {
    this.#oldestWatchable = this.#version;
    this.#log.length = 0;
  }

  get openWatches(): number {
    return this.#watches.size;
  }

  async get(ref: ObjectRef, signal?: AbortSignal): Promise<Stored<T>> {
    this.#enter("get", signal);
    return clone(this.#require(ref));
  }

  async list(options: ListOptions = {}): Promise<ListResult<Stored<T>>> {
    this.#enter("list", options.signal);
    const matches = this.#matcher(options);
    const items = [...this.#objects.values()].filter(matches).sort((a, b) => keyOf(a).localeCompare(keyOf(b)));
    return { items: items.map(clone), resourceVersion: String(this.#version) };
  }

  async create(obj: T, signal?: AbortSignal): Promise<Stored<T>> {
    this.#enter("create", signal);
    const name = obj.metadata?.name ?? "";
    const generateName = obj.metadata?.generateName ?? "";
    if (name === "" && generateName === "") {
      throw terminalError(KubeErrorCode.Invalid, `Cannot create ${this.resource.kind}: metadata.name: Required value: name or generateName is required`);
    }
    if (this.resource.namespaced && (obj.metadata?.namespace ?? "") === "") {
      throw terminalError("MissingNamespace", `Cannot create ${this.resource.kind} ${name}: a namespaced kind needs a namespace`);
    }
    const { deletionTimestamp: _d, deletionGracePeriodSeconds: _g, resourceVersion: _r, ...metadata } = obj.metadata ?? {};
    const stored: Stored<T> = {
      ...clone(obj),
      apiVersion: apiVersionOf(this.resource),
      kind: this.resource.kind,
      metadata: { ...clone(metadata), name: name === "" ? this.#generatedName(obj) : name, uid: randomUUID(), creationTimestamp: this.#timestamp(), generation: 1 },
    };
    delete (stored as { status?: unknown }).status; // the status subresource owns it
    if (!this.resource.namespaced) delete stored.metadata.namespace;
    if (this.#objects.has(keyOf(stored))) {
      throw conflictError(KubeErrorCode.AlreadyExists, `Cannot create ${describeObject(this.resource, keyOf(stored))}: it already exists`);
    }
    return clone(this.#commit("ADDED", undefined, stored));
  }

  async delete(ref: ObjectRef, options: DeleteOptions = {}): Promise<void> {
    this.#enter("delete", options.signal);
    const current = this.#require(ref);
    if (options.uid !== undefined && current.metadata?.uid !== options.uid) {
      throw conflictError(KubeErrorCode.Conflict, `Cannot delete ${this.#describe(ref)}: uid precondition failed`);
    }
    if ((current.metadata?.finalizers ?? []).length === 0) {
      this.#commit("DELETED", current, clone(current));
      return;
    }
    if (current.metadata?.deletionTimestamp !== undefined) return; // already deleting: nothing changes
    const next = clone(current);
    next.metadata = {
      ...next.metadata,
      deletionTimestamp: this.#timestamp(),
      deletionGracePeriodSeconds: 0,
      generation: (next.metadata?.generation ?? 0) + 1, // deleting is a change of intent
    };
    this.#commit("MODIFIED", current, next);
  }

  async patch(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<Stored<T>> {
    this.#enter("patch", signal);
    const { status: _ignored, ...rest } = patch;
    return clone(this.#patch(ref, rest, "main"));
  }

  async patchStatus(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<Stored<T>> {
    this.#enter("patchStatus", signal);
    const metadata = patch["metadata"] as { resourceVersion?: string } | undefined;
    const onlyStatus: Record<string, unknown> = { status: patch["status"] };
    if (metadata?.resourceVersion !== undefined) onlyStatus["metadata"] = { resourceVersion: metadata.resourceVersion };
    return clone(this.#patch(ref, onlyStatus, "status"));
  }

  watch(options: WatchOptions, onEvent: (type: WatchEventType, obj: T) => void): Promise<void> {
    let matches: (obj: T) => boolean;
    try {
      this.#enter("watch");
      matches = this.#matcher(options);
    } catch (err) {
      return Promise.reject(err);
    }
    const from = Number(options.resourceVersion);
    if (from < this.#oldestWatchable) {
      return Promise.reject(retryableError(KubeErrorCode.Gone, `Cannot watch ${this.resource.kind}: too old resource version ${from}`));
    }
    return new Promise<void>((resolve, reject) => {
      if (options.signal.aborted) {
        resolve();
        return;
      }
      const watch: OpenWatch = {
        push: (change) => {
          const type = eventFor(change as Change<T>, matches);
          if (type === undefined) return;
          try {
            onEvent(type, clone(change.obj) as T);
          } catch (err) {
            watch.end(err as ImpError);
          }
        },
        end: (err) => {
          this.#watches.delete(watch);
          options.signal.removeEventListener("abort", onAbort);
          if (err === undefined) resolve();
          else reject(err);
        },
      };
      const onAbort = (): void => watch.end();
      options.signal.addEventListener("abort", onAbort, { once: true });
      this.#watches.add(watch);
      for (const change of this.#log) if (change.version > from) watch.push(change);
    });
  }

  #matcher(options: { readonly namespace?: string | undefined; readonly labelSelector?: string | undefined; readonly fieldSelector?: string | undefined }): (obj: T) => boolean {
    const labels = parseLabelSelector(options.labelSelector ?? "");
    const fields = parseFieldSelector(options.fieldSelector ?? "", new Set(this.#fields.keys()));
    return (obj) =>
      (options.namespace === undefined || !this.resource.namespaced || obj.metadata?.namespace === options.namespace) &&
      matchesLabels(labels, obj.metadata?.labels) &&
      matchesFields(fields, (field) => this.#fields.get(field)?.(obj));
  }

  #patch(ref: ObjectRef, patch: Record<string, unknown>, part: "main" | "status"): Stored<T> {
    const current = this.#require(ref);
    const wanted = (patch["metadata"] as { resourceVersion?: unknown } | undefined)?.resourceVersion;
    if (wanted !== undefined && wanted !== null && wanted !== current.metadata?.resourceVersion) {
      throw conflictError(
        KubeErrorCode.Conflict,
        `Cannot patch ${this.#describe(ref)}: the object has been modified; please apply your changes to the latest version and try again`,
      );
    }
    // Name and uid are among the owned fields put back from `current` below.
    const next = applyMergePatch(clone(current), patch) as Stored<T>;
    // Fields the server owns: a patch cannot change them.
    const before: ObjectMeta = current.metadata;
    const meta: ObjectMeta = { ...next.metadata };
    for (const owned of ["name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName"]) {
      if (before[owned] === undefined) delete meta[owned];
      else meta[owned] = before[owned];
    }
    if (part === "main") {
      const finalizers = meta.finalizers ?? [];
      if (before.deletionTimestamp !== undefined && finalizers.some((f) => !(before.finalizers ?? []).includes(f))) {
        throw terminalError(
          KubeErrorCode.Invalid,
          `Cannot patch ${this.#describe(ref)}: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted`,
        );
      }
      if (finalizers.length === 0) delete meta.finalizers;
      if (!jsonEqual(withoutMetaAndStatus(current), withoutMetaAndStatus(next))) meta.generation = (before.generation ?? 0) + 1;
    }
    next.metadata = { ...meta, name: current.metadata.name, uid: current.metadata.uid };
    if (jsonEqual(current, next)) return current; // no change, no write
    if (before.deletionTimestamp !== undefined && (meta.finalizers ?? []).length === 0) {
      return this.#commit("DELETED", current, next); // the last finalizer is gone: the deletion completes
    }
    return this.#commit("MODIFIED", current, next);
  }

  #commit(type: Change<T>["type"], prev: Stored<T> | undefined, obj: Stored<T>): Stored<T> {
    this.#version += 1;
    const stamped = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(this.#version) } };
    if (type === "DELETED") this.#objects.delete(keyOf(stamped));
    else this.#objects.set(keyOf(stamped), stamped);
    const change = { version: this.#version, type, prev, obj: stamped };
    this.#log.push(change);
    for (const watch of [...this.#watches]) watch.push(change);
    return stamped;
  }

  /** Like the API server: a clashing random name is retried a few times, then it is AlreadyExists. */
  #generatedName(obj: T): string {
    const prefix = obj.metadata?.generateName ?? "";
    let name = prefix;
    for (let attempt = 0; attempt < GENERATE_NAME_ATTEMPTS; attempt++) {
      let suffix = "";
      for (let i = 0; i < GENERATED_SUFFIX_LENGTH; i++) suffix += NAME_ALPHABET[Math.floor(this.#random() * NAME_ALPHABET.length)] ?? "x";
      name = `${prefix}${suffix}`;
      const key = this.resource.namespaced ? `${obj.metadata?.namespace ?? ""}/${name}` : name;
      if (!this.#objects.has(key)) return name;
    }
    throw conflictError(KubeErrorCode.AlreadyExists, `Cannot create ${this.resource.kind} ${name}: it already exists (generated name clashed ${GENERATE_NAME_ATTEMPTS} times)`);
  }

  /** RFC 3339 with whole seconds, as the API server writes metav1.Time. */
  #timestamp(): string {
    return new Date(this.#clock.now()).toISOString().replace(/\.\d{3}Z$/, "Z");
  }

  #require(ref: ObjectRef): Stored<T> {
    const key = this.resource.namespaced ? `${ref.namespace ?? ""}/${ref.name}` : ref.name;
    const obj = this.#objects.get(key);
    if (obj === undefined) throw terminalError(KubeErrorCode.NotFound, `Cannot find ${this.#describe(ref)}: it does not exist`);
    return obj;
  }

  #describe(ref: ObjectRef): string {
    return describeObject(this.resource, this.resource.namespaced ? `${ref.namespace ?? ""}/${ref.name}` : ref.name);
  }

  #enter(method: Method, signal?: AbortSignal): void {
    signal?.throwIfAborted();
    this.calls[method] += 1;
    const index = this.#faults.findIndex((f) => f.method === method);
    if (index >= 0) {
      const [fault] = this.#faults.splice(index, 1);
      if (fault !== undefined) throw fault.error;
    }
  }
}

/**
 * What a selecting watch reports for one change (the watch cache's rule): an update that makes an
 * object match is ADDED, one that makes it stop matching is DELETED, one that matches neither side
 * is not sent.
 */
function eventFor<T>(change: Change<T>, matches: (obj: T) => boolean): Exclude<WatchEventType, "BOOKMARK"> | undefined {
  const now = matches(change.obj);
  if (change.type !== "MODIFIED") return now ? change.type : undefined;
  const before = change.prev !== undefined && matches(change.prev);
  if (before && now) return "MODIFIED";
  if (now) return "ADDED";
  if (before) return "DELETED";
  return undefined;
}

function withoutMetaAndStatus(obj: KubeObject): unknown {
  const { metadata: _m, status: _s, apiVersion: _a, kind: _k, ...rest } = obj as KubeObject & { status?: unknown };
  return rest;
}

function clone<V>(value: V): V {
  return structuredClone(value);
}
