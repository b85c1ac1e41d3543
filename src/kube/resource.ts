import { terminalError, type ObjectMeta as WireObjectMeta } from "../shared/index.ts";

/**
 * What the runtime needs to know about a kind, and nothing more. `src/api` builds these from its
 * TypeBox definitions; core kinds use `group: ""`. The runtime never depends on concrete types.
 */
export interface ResourceDescriptor {
  /** API group; `""` for the core group (`/api/v1`). */
  readonly group: string;
  readonly version: string;
  /** Lower-case plural as served in the URL path, e.g. `configmaps`, `impvms`. */
  readonly plural: string;
  readonly kind: string;
  readonly namespaced: boolean;
}

/**
 * Builds a descriptor from CRD-style names (`scope: "Cluster" | "Namespaced"`), e.g. src/api's
 * `KindNames`: `resourceDescriptor({ group: GROUP, version: VERSION, ...IMP_VM })`. Structural, so
 * src/kube does not depend on src/api.
 */
export function resourceDescriptor(names: {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
  readonly plural: string;
  readonly scope: "Cluster" | "Namespaced";
}): ResourceDescriptor {
  return { group: names.group, version: names.version, plural: names.plural, kind: names.kind, namespaced: names.scope === "Namespaced" };
}

/** Object metadata: the fields Imp knows (src/shared), and everything else passed through untouched. */
export type ObjectMeta = WireObjectMeta & { [extra: string]: unknown };

/** The shape every Kubernetes object shares. Kind-specific fields are carried by `T extends KubeObject`. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

/**
 * An object as the API server returns it once stored: it always has a name (a generated one is
 * filled in by then) and a uid. Clients and informers hand out only these, checked once where the
 * object enters the process (`asStored`), so no reader has to invent a name for an object without
 * one. Namespaces stay optional: cluster-scoped kinds have none.
 */
export type Stored<T extends KubeObject> = T & { metadata: ObjectMeta & { name: string; uid: string } };

/**
 * Checks what `Stored` promises on an object read from the API. A real API server never fails it;
 * a broken proxy or a hand-written fake can, and then the read fails loudly instead of filing the
 * object under an empty name.
 */
export function asStored<T extends KubeObject>(obj: T, resource: ResourceDescriptor): Stored<T> {
  const meta = obj.metadata;
  if (meta === undefined || typeof meta.name !== "string" || meta.name === "" || typeof meta.uid !== "string" || meta.uid === "") {
    throw terminalError("MalformedObject", `The API returned a ${resource.kind} without ${meta?.name ? "metadata.uid" : "metadata.name"}; a stored object always has both (is something between Imp and the API server rewriting responses?)`);
  }
  return obj as Stored<T>;
}

/** `group/version`, or just `version` for the core group, as written in `apiVersion`. */
export function apiVersionOf(resource: ResourceDescriptor): string {
  return resource.group === "" ? resource.version : `${resource.group}/${resource.version}`;
}

/** The collection URL path, e.g. `/api/v1/namespaces/ns/configmaps` or `/apis/imp.dev/v1alpha1/impnodes`. */
export function collectionPath(resource: ResourceDescriptor, namespace?: string): string {
  const root = resource.group === "" ? `/api/${resource.version}` : `/apis/${resource.group}/${resource.version}`;
  const scoped = resource.namespaced && namespace !== undefined ? `/namespaces/${encodeURIComponent(namespace)}` : "";
  return `${root}${scoped}/${resource.plural}`;
}

/**
 * Queue and cache key: `namespace/name` for namespaced objects, `name` for cluster-scoped ones
 * (the same convention as client-go's `MetaNamespaceKeyFunc`).
 */
export type ObjectKey = string;

export function keyOf(obj: { readonly metadata?: { readonly name?: string; readonly namespace?: string } | undefined }): ObjectKey {
  const name = obj.metadata?.name ?? "";
  const namespace = obj.metadata?.namespace;
  return namespace === undefined || namespace === "" ? name : `${namespace}/${name}`;
}

/** Splits a key back into namespace and name; `namespace` is undefined for cluster-scoped keys. */
export function parseKey(key: ObjectKey): { readonly namespace: string | undefined; readonly name: string } {
  const slash = key.indexOf("/");
  return slash < 0 ? { namespace: undefined, name: key } : { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}

/** A describing label for messages: `ConfigMap ns/name`. */
export function describeObject(resource: ResourceDescriptor, key: ObjectKey): string {
  return `${resource.kind} ${key}`;
}
