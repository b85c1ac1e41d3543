import {
  CustomObjectsApi,
  Observable,
  PatchStrategy,
  Watch,
  type ConfigurationOptions,
  type KubeConfig,
  type ObservableMiddleware,
  type RequestContext,
  type ResponseContext,
} from "@kubernetes/client-node";
import { classifyApiError } from "./api-errors.ts";
import { apiVersionOf, asStored, collectionPath, describeObject, type KubeObject, type ResourceDescriptor, type Stored } from "./resource.ts";
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
import { terminalError } from "../shared/index.ts";

export interface KubeResourceClientOptions {
  /** Deadline for each non-watch call. */
  readonly callTimeoutMs?: number;
  /** Recorded as `managedFields[].manager` on writes. */
  readonly fieldManager?: string;
  /** Objects per list request; `list` follows continue tokens until done. */
  readonly listPageSize?: number;
}

export const DEFAULT_CALL_TIMEOUT_MS = 15_000;
export const DEFAULT_FIELD_MANAGER = "imp";
/** client-go's reflector pages by 500 too. */
export const LIST_PAGE_SIZE = 500;

/**
 * `ResourceClient` over client-node's `CustomObjectsApi`, for any kind including core ones.
 *
 * Why CustomObjectsApi for core kinds: it is the only generated API that takes group/version/plural
 * as data and reaches `/status`; `KubernetesObjectApi` needs a discovery round trip per kind and has
 * no status subresource. CustomObjectsApi always builds `/apis/{group}/...`, so a request middleware
 * maps the empty core group (`/apis//v1/`) to `/api/v1/`. The same middleware sets the merge-patch
 * content type (the generated default is JSON patch) and the per-call deadline.
 */
export function createResourceClient<T extends KubeObject>(
  kubeConfig: KubeConfig,
  resource: ResourceDescriptor,
  options: KubeResourceClientOptions = {},
): ResourceClient<T> {
  return new KubeResourceClient<T>(kubeConfig, resource, options);
}

class KubeResourceClient<T extends KubeObject> implements ResourceClient<T> {
  readonly resource: ResourceDescriptor;
  readonly #kubeConfig: KubeConfig;
  readonly #api: CustomObjectsApi;
  readonly #watcher: Watch;
  readonly #timeoutMs: number;
  readonly #fieldManager: string;
  readonly #apiVersion: string;
  readonly #pageSize: number;

  constructor(kubeConfig: KubeConfig, resource: ResourceDescriptor, options: KubeResourceClientOptions) {
    this.resource = resource;
    this.#kubeConfig = kubeConfig;
    this.#api = kubeConfig.makeApiClient(CustomObjectsApi);
    this.#watcher = new Watch(kubeConfig);
    this.#timeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.#fieldManager = options.fieldManager ?? DEFAULT_FIELD_MANAGER;
    this.#apiVersion = apiVersionOf(resource);
    this.#pageSize = options.listPageSize ?? LIST_PAGE_SIZE;
  }

  async get(ref: ObjectRef, signal?: AbortSignal): Promise<Stored<T>> {
    return this.#stored(await this.#call("get", this.#describe(ref), signal, (o) =>
      this.resource.namespaced
        ? this.#api.getNamespacedCustomObject({ ...this.#target(), namespace: this.#namespaceOf(ref), name: ref.name }, o)
        : this.#api.getClusterCustomObject({ ...this.#target(), name: ref.name }, o),
    ));
  }

  /** Pages through the collection (`listPageSize` per request) so huge lists do not arrive in one response. */
  async list(options: ListOptions = {}): Promise<ListResult<Stored<T>>> {
    const what = `${this.resource.kind} list${options.namespace === undefined ? "" : ` in ${options.namespace}`}`;
    const query = {
      ...this.#target(),
      limit: this.#pageSize,
      ...(options.labelSelector === undefined ? {} : { labelSelector: options.labelSelector }),
      ...(options.fieldSelector === undefined ? {} : { fieldSelector: options.fieldSelector }),
    };
    const items: Stored<T>[] = [];
    let resourceVersion = "";
    let next: string | undefined;
    do {
      const page = { ...query, ...(next === undefined ? {} : { _continue: next }) };
      const body = (await this.#call("list", what, options.signal, (o) =>
        this.resource.namespaced && options.namespace !== undefined
          ? this.#api.listNamespacedCustomObject({ ...page, namespace: options.namespace }, o)
          : this.#api.listClusterCustomObject(page, o),
      )) as { items?: T[]; metadata?: { resourceVersion?: string; continue?: string } };
      // List items carry no apiVersion/kind; fill them so cached objects look like fetched ones.
      for (const item of body.items ?? []) items.push(asStored({ ...item, apiVersion: this.#apiVersion, kind: this.resource.kind }, this.resource));
      // Every page of one list is served from the snapshot of the first; its version is the list's.
      if (resourceVersion === "") resourceVersion = body.metadata?.resourceVersion ?? "";
      next = body.metadata?.continue === "" ? undefined : body.metadata?.continue;
    } while (next !== undefined);
    return { items, resourceVersion };
  }

  async create(obj: T, signal?: AbortSignal): Promise<Stored<T>> {
    const ref = { namespace: obj.metadata?.namespace, name: obj.metadata?.name ?? obj.metadata?.generateName ?? "" };
    const body = { ...obj, apiVersion: this.#apiVersion, kind: this.resource.kind };
    const fieldManager = this.#fieldManager;
    return this.#stored(await this.#call("create", this.#describe(ref), signal, (o) =>
      this.resource.namespaced
        ? this.#api.createNamespacedCustomObject({ ...this.#target(), namespace: this.#namespaceOf(ref), body, fieldManager }, o)
        : this.#api.createClusterCustomObject({ ...this.#target(), body, fieldManager }, o),
    ));
  }

  async delete(ref: ObjectRef, options: DeleteOptions = {}): Promise<void> {
    const body = {
      ...(options.propagationPolicy === undefined ? {} : { propagationPolicy: options.propagationPolicy }),
      ...(options.uid === undefined ? {} : { preconditions: { uid: options.uid } }),
    };
    await this.#call("delete", this.#describe(ref), options.signal, (o) =>
      this.resource.namespaced
        ? this.#api.deleteNamespacedCustomObject({ ...this.#target(), namespace: this.#namespaceOf(ref), name: ref.name, body }, o)
        : this.#api.deleteClusterCustomObject({ ...this.#target(), name: ref.name, body }, o),
    );
  }

  async patch(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<Stored<T>> {
    const args = { ...this.#target(), name: ref.name, body: patch, fieldManager: this.#fieldManager };
    return this.#stored(await this.#call("patch", this.#describe(ref), signal, (o) =>
      this.resource.namespaced
        ? this.#api.patchNamespacedCustomObject({ ...args, namespace: this.#namespaceOf(ref) }, o)
        : this.#api.patchClusterCustomObject(args, o),
    ));
  }

  async patchStatus(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<Stored<T>> {
    const args = { ...this.#target(), name: ref.name, body: patch, fieldManager: this.#fieldManager };
    return this.#stored(await this.#call("patch status of", this.#describe(ref), signal, (o) =>
      this.resource.namespaced
        ? this.#api.patchNamespacedCustomObjectStatus({ ...args, namespace: this.#namespaceOf(ref) }, o)
        : this.#api.patchClusterCustomObjectStatus(args, o),
    ));
  }

  watch(options: WatchOptions, onEvent: (type: WatchEventType, obj: T) => void): Promise<void> {
    return runWatch(this.#watcher, { resource: this.resource, options, onEvent: onEvent as (t: WatchEventType, o: unknown) => void });
  }

  #stored(body: unknown): Stored<T> {
    return asStored(body as T, this.resource);
  }

  #target(): { group: string; version: string; plural: string } {
    return { group: this.resource.group, version: this.resource.version, plural: this.resource.plural };
  }

  #describe(ref: ObjectRef): string {
    return describeObject(this.resource, this.resource.namespaced ? `${ref.namespace ?? "?"}/${ref.name}` : ref.name);
  }

  #namespaceOf(ref: ObjectRef): string {
    if (ref.namespace === undefined || ref.namespace === "") {
      throw terminalError("MissingNamespace", `Cannot address ${this.#describe(ref)}: a namespaced kind needs a namespace`);
    }
    return ref.namespace;
  }

  async #call<R>(action: string, object: string, signal: AbortSignal | undefined, run: (o: ConfigurationOptions) => Promise<R>): Promise<R> {
    try {
      return await run(requestOptions(this.#kubeConfig, this.#timeoutMs, signal));
    } catch (err) {
      throw classifyApiError(err, { action, object });
    }
  }
}

type Dispatcher = NonNullable<ReturnType<RequestContext["getDispatcher"]>>;

/**
 * client-node 2.0.1 builds a new undici Agent for every request (`KubeConfig.createDispatcher`), so
 * no connection is ever reused: 100 GETs open 100 TLS connections. We keep the first dispatcher
 * built for a KubeConfig and put it on every later request. Cost: client certificates are read
 * once per process (restart to rotate them; bearer tokens are headers and still refresh).
 */
const sharedDispatchers = new WeakMap<KubeConfig, Dispatcher>();

/** Per-call options: core-group path fix, merge-patch content type, shared connection pool, deadline joined with the caller's signal. */
function requestOptions(kubeConfig: KubeConfig, timeoutMs: number, signal: AbortSignal | undefined): ConfigurationOptions {
  const deadline = AbortSignal.timeout(timeoutMs);
  const middleware: ObservableMiddleware = {
    pre(context: RequestContext): Observable<RequestContext> {
      const own = context.getDispatcher();
      if (own !== undefined) {
        const shared = sharedDispatchers.get(kubeConfig) ?? own;
        sharedDispatchers.set(kubeConfig, shared);
        context.setDispatcher(shared);
      }
      context.setUrl(context.getUrl().replace("/apis//", "/api/"));
      if (String(context.getHttpMethod()) === "PATCH") context.setHeaderParam("Content-Type", PatchStrategy.MergePatch);
      context.setSignal(signal === undefined ? deadline : AbortSignal.any([deadline, signal]));
      return new Observable(Promise.resolve(context));
    },
    post: (context: ResponseContext): Observable<ResponseContext> => new Observable(Promise.resolve(context)),
  };
  return { middleware: [middleware], middlewareMergeStrategy: "append" };
}

/**
 * One watch request through client-node's `Watch`, as a promise. client-node ends a watch after
 * 30 s without bytes and ignores unparseable lines; callers therefore keep `timeoutSeconds` below 30
 * so the server closes quiet watches first, and treat every end as "resume from the last version".
 */
function runWatch(
  watcher: Watch,
  { resource, options, onEvent }: { resource: ResourceDescriptor; options: WatchOptions; onEvent: (type: WatchEventType, obj: unknown) => void },
): Promise<void> {
  const what = `${resource.kind} watch`;
  const query = {
    resourceVersion: options.resourceVersion,
    allowWatchBookmarks: true,
    timeoutSeconds: options.timeoutSeconds,
    labelSelector: options.labelSelector,
    fieldSelector: options.fieldSelector,
  };
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    let controller: AbortController | undefined;
    const finish = (err?: unknown, fromHandler = false): void => {
      if (settled) return;
      settled = true;
      options.signal.removeEventListener("abort", onAbort);
      controller?.abort();
      if (err === undefined || err === null) resolve();
      else reject(fromHandler ? err : classifyApiError(err, { action: "watch", object: what }));
    };
    const onAbort = (): void => finish();
    if (options.signal.aborted) {
      resolve();
      return;
    }
    options.signal.addEventListener("abort", onAbort, { once: true });
    const onLine = (type: string, obj: unknown): void => {
      if (settled) return;
      if (type === "ERROR") {
        // A Status object: 410 Expired when the resume version was compacted away.
        const status = obj as { code?: unknown };
        finish({ code: typeof status.code === "number" ? status.code : 500, body: obj });
        return;
      }
      try {
        onEvent(type as WatchEventType, obj);
      } catch (err) {
        finish(err, true);
      }
    };
    watcher.watch(collectionPath(resource, options.namespace), query, onLine, (err: unknown) => finish(err)).then(
      (c) => {
        controller = c;
        if (settled) c.abort();
      },
      (err: unknown) => finish(err),
    );
  });
}
