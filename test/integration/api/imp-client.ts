/**
 * A thin client for Imp objects in the API tests: finds group/version/plural/scope from the API
 * definitions, so a test names only the object. Errors are the client's ApiException; use
 * `rejection()` to read the API server's message.
 */
import assert from "node:assert/strict";
import { ApiException, CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import { GROUP, KIND_DEFINITIONS, VERSION, type KindNames } from "../../../src/api/index.ts";
import { serverMessage } from "../../../src/kube/index.ts";

/** Any Imp object as plain JSON. */
export interface AnyImpObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; [k: string]: unknown };
  spec?: unknown;
  status?: unknown;
  [k: string]: unknown;
}

export class ImpClient {
  readonly #api: CustomObjectsApi;
  readonly #namespace: string;

  constructor(kubeConfig: KubeConfig, namespace: string) {
    this.#api = kubeConfig.makeApiClient(CustomObjectsApi);
    this.#namespace = namespace;
  }

  #target(obj: AnyImpObject): { names: KindNames; base: { group: string; version: string; plural: string }; ns?: string } {
    const def = KIND_DEFINITIONS.find((d) => d.names.kind === obj.kind);
    if (def === undefined) throw new Error(`Cannot address ${obj.kind}: not an Imp kind`);
    const base = { group: GROUP, version: VERSION, plural: def.names.plural };
    return def.names.scope === "Namespaced" ? { names: def.names, base, ns: obj.metadata.namespace ?? this.#namespace } : { names: def.names, base };
  }

  async create(obj: AnyImpObject): Promise<AnyImpObject> {
    const t = this.#target(obj);
    return t.ns === undefined
      ? ((await this.#api.createClusterCustomObject({ ...t.base, body: obj })) as AnyImpObject)
      : ((await this.#api.createNamespacedCustomObject({ ...t.base, namespace: t.ns, body: obj })) as AnyImpObject);
  }

  async get(obj: AnyImpObject): Promise<AnyImpObject> {
    const t = this.#target(obj);
    const name = obj.metadata.name;
    return t.ns === undefined
      ? ((await this.#api.getClusterCustomObject({ ...t.base, name })) as AnyImpObject)
      : ((await this.#api.getNamespacedCustomObject({ ...t.base, namespace: t.ns, name })) as AnyImpObject);
  }

  async replace(obj: AnyImpObject): Promise<AnyImpObject> {
    const t = this.#target(obj);
    const name = obj.metadata.name;
    return t.ns === undefined
      ? ((await this.#api.replaceClusterCustomObject({ ...t.base, name, body: obj })) as AnyImpObject)
      : ((await this.#api.replaceNamespacedCustomObject({ ...t.base, namespace: t.ns, name, body: obj })) as AnyImpObject);
  }

  async replaceStatus(obj: AnyImpObject): Promise<AnyImpObject> {
    const t = this.#target(obj);
    const name = obj.metadata.name;
    return t.ns === undefined
      ? ((await this.#api.replaceClusterCustomObjectStatus({ ...t.base, name, body: obj })) as AnyImpObject)
      : ((await this.#api.replaceNamespacedCustomObjectStatus({ ...t.base, namespace: t.ns, name, body: obj })) as AnyImpObject);
  }

  async delete(obj: AnyImpObject): Promise<void> {
    const t = this.#target(obj);
    const name = obj.metadata.name;
    if (t.ns === undefined) await this.#api.deleteClusterCustomObject({ ...t.base, name });
    else await this.#api.deleteNamespacedCustomObject({ ...t.base, namespace: t.ns, name });
  }
}

/** Awaits a call that must fail with 422 Invalid, and returns the API server's message. */
export async function rejection(call: Promise<unknown>): Promise<string> {
  try {
    await call;
  } catch (err) {
    if (err instanceof ApiException) {
      const message = serverMessage(err);
      assert.equal(err.code, 422, `expected 422 Invalid, got ${err.code}: ${message}`);
      return message;
    }
    throw err;
  }
  assert.fail("the API server accepted an object it should have rejected");
}

/** Deep copy of a JSON object, for building variants of a valid object. */
export const clone = <T>(value: T): T => structuredClone(value);
