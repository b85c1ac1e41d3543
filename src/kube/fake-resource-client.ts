import { conflictError, retryableError, terminalError, type ImpError } from "../shared/index.ts";
import { KubeErrorCode } from "./api-errors.ts";
import { applyMergePatch } from "./merge-patch.ts";
import { apiVersionOf, describeObject, keyOf, type KubeObject, type ResourceDescriptor } from "./resource.ts";
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

type Method = "get" | "list" | "create" | "delete" | "patch" | "patchStatus" | "watch";

interface Change<T> {
  readonly version: number;
  readonly type: Exclude<WatchEventType, "BOOKMARK">;
  readonly obj: T;
}

interface OpenWatch {
  readonly namespace: string | undefined;
  readonly push: (change: Change<KubeObject>) => void;
  readonly end: (err?: ImpError) => void;
}

/**
 * An in-memory apiserver for one kind that honours the `ResourceClient` contract: resourceVersion
 * preconditions (conflict), NotFound, AlreadyExists, status subresource separation, watches that
 * resume from a version, and compaction (`Gone`). Fault hooks let tests break it on purpose.
 * For unit tests of code that takes a `ResourceClient`; integration tests use the real one.
 */
export class FakeResourceClient<T extends KubeObject> implements ResourceClient<T> {
  readonly resource: ResourceDescriptor;
  #version = 0;
  #oldestWatchable = 0;
  readonly #objects = new Map<string, T>();
  readonly #log: Array<Change<T>> = [];
  readonly #watches = new Set<OpenWatch>();
  readonly #faults: Array<{ method: Method; error: ImpError }> = [];
  /** Calls per method, for tests that need to know a path was taken (prefer asserting state). */
  readonly calls: Record<Method, number> = { get: 0, list: 0, create: 0, delete: 0, patch: 0, patchStatus: 0, watch: 0 };

  constructor(resource: ResourceDescriptor) {
    this.resource = resource;
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

  async get(ref: ObjectRef, signal?: AbortSignal): Promise<T> {
    this.#enter("get", signal);
    return clone(this.#require(ref));
  }

  async list(options: ListOptions = {}): Promise<ListResult<T>> {
    this.#enter("list", options.signal);
    const items = [...this.#objects.values()].filter((o) => options.namespace === undefined || o.metadata?.namespace === options.namespace);
    return { items: items.map(clone), resourceVersion: String(this.#version) };
  }

  async create(obj: T, signal?: AbortSignal): Promise<T> {
    this.#enter("create", signal);
    const key = keyOf(obj);
    if (this.#objects.has(key)) {
      throw conflictError(KubeErrorCode.AlreadyExists, `Cannot create ${describeObject(this.resource, key)}: it already exists`);
    }
    const stored = { ...clone(obj), apiVersion: apiVersionOf(this.resource), kind: this.resource.kind };
    stored.metadata = { ...stored.metadata, uid: `uid-${this.#version + 1}`, creationTimestamp: new Date(0).toISOString() };
    return clone(this.#commit("ADDED", stored));
  }

  async delete(ref: ObjectRef, options: DeleteOptions = {}): Promise<void> {
    this.#enter("delete", options.signal);
    const current = this.#require(ref);
    if (options.uid !== undefined && current.metadata?.uid !== options.uid) {
      throw conflictError(KubeErrorCode.Conflict, `Cannot delete ${this.#describe(ref)}: uid precondition failed`);
    }
    this.#commit("DELETED", clone(current));
  }

  async patch(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<T> {
    this.#enter("patch", signal);
    const { status: _ignored, ...rest } = patch;
    return clone(this.#patch(ref, rest));
  }

  async patchStatus(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<T> {
    this.#enter("patchStatus", signal);
    const metadata = patch["metadata"] as { resourceVersion?: string } | undefined;
    const onlyStatus: Record<string, unknown> = { status: patch["status"] };
    if (metadata?.resourceVersion !== undefined) onlyStatus["metadata"] = { resourceVersion: metadata.resourceVersion };
    return clone(this.#patch(ref, onlyStatus));
  }

  watch(options: WatchOptions, onEvent: (type: WatchEventType, obj: T) => void): Promise<void> {
    try {
      this.#enter("watch");
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
      const matches = (obj: KubeObject): boolean => options.namespace === undefined || obj.metadata?.namespace === options.namespace;
      const watch: OpenWatch = {
        namespace: options.namespace,
        push: (change) => {
          if (!matches(change.obj)) return;
          try {
            onEvent(change.type, clone(change.obj) as T);
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

  #patch(ref: ObjectRef, patch: Record<string, unknown>): T {
    const current = this.#require(ref);
    const wanted = (patch["metadata"] as { resourceVersion?: unknown } | undefined)?.resourceVersion;
    if (wanted !== undefined && wanted !== current.metadata?.resourceVersion) {
      throw conflictError(
        KubeErrorCode.Conflict,
        `Cannot patch ${this.#describe(ref)}: the object has been modified; please apply your changes to the latest version and try again`,
      );
    }
    const next = applyMergePatch(clone(current), patch) as T;
    return this.#commit("MODIFIED", next);
  }

  #commit(type: Change<T>["type"], obj: T): T {
    this.#version += 1;
    const stamped = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(this.#version) } };
    if (type === "DELETED") this.#objects.delete(keyOf(stamped));
    else this.#objects.set(keyOf(stamped), stamped);
    const change = { version: this.#version, type, obj: stamped };
    this.#log.push(change);
    for (const watch of [...this.#watches]) watch.push(change);
    return stamped;
  }

  #require(ref: ObjectRef): T {
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

function clone<V>(value: V): V {
  return structuredClone(value);
}
