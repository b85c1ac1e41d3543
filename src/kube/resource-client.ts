import type { KubeObject, ResourceDescriptor, Stored } from "./resource.ts";

/** Names one object. `namespace` is required for namespaced kinds and ignored otherwise. */
export interface ObjectRef {
  readonly namespace?: string | undefined;
  readonly name: string;
}

/** A JSON merge patch (RFC 7386): objects merge, `null` deletes, arrays replace. */
export type MergePatch = Readonly<Record<string, unknown>>;

export interface ListOptions {
  /** Limit to one namespace; omit for all namespaces (or for cluster-scoped kinds). */
  readonly namespace?: string | undefined;
  readonly labelSelector?: string | undefined;
  readonly fieldSelector?: string | undefined;
  readonly signal?: AbortSignal | undefined;
}

export interface ListResult<T> {
  readonly items: readonly T[];
  /** The collection's resourceVersion: start a watch here to see every later change. */
  readonly resourceVersion: string;
}

export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK";

export interface WatchOptions {
  readonly namespace?: string | undefined;
  readonly labelSelector?: string | undefined;
  readonly fieldSelector?: string | undefined;
  /** Resume point; events after it are delivered. */
  readonly resourceVersion: string;
  /**
   * Server-side lifetime of the watch. The server ends the stream cleanly after it, and the caller
   * resumes from the last resourceVersion it saw.
   */
  readonly timeoutSeconds: number;
  readonly signal: AbortSignal;
}

export interface DeleteOptions {
  readonly propagationPolicy?: "Foreground" | "Background" | "Orphan";
  /** Delete only if the object still has this uid (guards against deleting a re-created namesake). */
  readonly uid?: string;
  readonly signal?: AbortSignal;
}

/**
 * Typed access to one kind. Every method either resolves or throws an `ImpError`
 * classified by `classifyApiError` (NotFound is terminal, Conflict/AlreadyExists are conflicts,
 * Gone/429/5xx/network failures retryable). Every call has a deadline; none retries by itself.
 */
export interface ResourceClient<T extends KubeObject> {
  readonly resource: ResourceDescriptor;
  get(ref: ObjectRef, signal?: AbortSignal): Promise<Stored<T>>;
  list(options?: ListOptions): Promise<ListResult<Stored<T>>>;
  /** `obj.metadata.namespace` picks the namespace; apiVersion and kind are filled in. */
  create(obj: T, signal?: AbortSignal): Promise<Stored<T>>;
  delete(ref: ObjectRef, options?: DeleteOptions): Promise<void>;
  /**
   * JSON merge patch of the main resource (status changes are ignored by kinds with a status
   * subresource). Including `metadata.resourceVersion` makes it conditional: a stale version fails
   * with a conflict instead of overwriting.
   */
  patch(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<Stored<T>>;
  /** JSON merge patch of the `/status` subresource, in its own call. */
  patchStatus(ref: ObjectRef, patch: MergePatch, signal?: AbortSignal): Promise<Stored<T>>;
  /**
   * Streams changes after `resourceVersion` to `onEvent` until the server ends the watch (resolves)
   * or the stream fails (rejects, classified; an expired resourceVersion rejects with code `Gone`).
   * Resolves when `signal` aborts. A throwing `onEvent` ends the watch with that error. Objects
   * are not yet checked as `Stored`: a BOOKMARK carries only `metadata.resourceVersion`.
   */
  watch(options: WatchOptions, onEvent: (type: WatchEventType, obj: T) => void): Promise<void>;
}
