/**
 * Applies CRDs to a cluster and waits until the API server serves them: the Imp CRDs (src/api's
 * `buildAllCrds()`, which stays free of I/O) for the CLI, the demo and the tests. Idempotent:
 * existing CRDs are replaced with the given definition, so running it again after an upgrade
 * updates the schemas.
 */
import { ApiextensionsV1Api, loadYaml, type ApiException, type KubeConfig, type V1CustomResourceDefinition } from "@kubernetes/client-node";
import { retry, systemClock, terminalError, waitFor, type Clock, type ImpError } from "../shared/index.ts";
import { classifyApiError, isNotFound } from "./api-errors.ts";

/** What this needs of a CRD manifest (src/api's CrdManifest is one). */
export interface CrdManifest {
  readonly metadata: { readonly name: string };
}

export interface InstallCrdsOptions {
  /** How long to wait for every CRD to be Established. Default 60 s. */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
  readonly clock?: Clock;
}

/** Result per CRD: whether it was created or replaced. */
export interface InstalledCrd {
  readonly name: string;
  readonly action: "created" | "replaced";
}

/**
 * Creates or replaces each CRD, then waits until all report `Established=True`. Throws a
 * terminal error when the API server rejects a CRD (the message carries the server's reason) or
 * its names conflict with another CRD, and a retryable "Timeout" error when they are not
 * Established within `timeoutMs`.
 */
export async function installCrds(kubeConfig: KubeConfig, crds: readonly CrdManifest[], options: InstallCrdsOptions = {}): Promise<InstalledCrd[]> {
  const api = kubeConfig.makeApiClient(ApiextensionsV1Api);
  const clock = options.clock ?? systemClock;
  const results: InstalledCrd[] = [];
  for (const crd of crds) {
    const action = await retry(() => applyOne(api, crd), { clock, ...(options.signal ? { signal: options.signal } : {}) });
    results.push({ name: crd.metadata.name, action });
  }
  await waitFor(
    `wait for the CRDs to be Established`,
    async () => {
      for (const crd of crds) if (!(await isEstablished(api, crd.metadata.name))) return undefined;
      return true;
    },
    { timeoutMs: options.timeoutMs ?? 60_000, intervalMs: 200, ...(options.signal ? { signal: options.signal } : {}) },
  );
  return results;
}

/** The client serializes by its model's field names, so wire-named JSON goes through its deserializer first. */
export function toClientModel(crd: CrdManifest): V1CustomResourceDefinition {
  return loadYaml<V1CustomResourceDefinition>(JSON.stringify(crd));
}

async function applyOne(api: ApiextensionsV1Api, crd: CrdManifest): Promise<"created" | "replaced"> {
  const name = crd.metadata.name;
  const body = toClientModel(crd);
  try {
    let existing: V1CustomResourceDefinition | undefined;
    try {
      existing = await api.readCustomResourceDefinition({ name });
    } catch (err) {
      const classified = classifyApiError(err, { action: "read", object: `CRD ${name}` });
      if (!isNotFound(classified)) throw classified;
    }
    if (existing === undefined) {
      await api.createCustomResourceDefinition({ body });
      return "created";
    }
    body.metadata = { ...body.metadata, resourceVersion: existing.metadata?.resourceVersion ?? "" };
    await api.replaceCustomResourceDefinition({ name, body });
    return "replaced";
  } catch (err) {
    throw classifyApplyError(err, name);
  }
}

async function isEstablished(api: ApiextensionsV1Api, name: string): Promise<boolean> {
  let crd: V1CustomResourceDefinition;
  try {
    crd = await api.readCustomResourceDefinition({ name });
  } catch (err) {
    throw classifyApiError(err, { action: "read", object: `CRD ${name}` });
  }
  const conditions = crd.status?.conditions ?? [];
  const namesAccepted = conditions.find((c) => c.type === "NamesAccepted");
  if (namesAccepted?.status === "False") {
    throw terminalError("CrdNamesConflict", `Cannot install CRD ${name}: names not accepted: ${namesAccepted.message ?? namesAccepted.reason ?? ""}`);
  }
  return conditions.some((c) => c.type === "Established" && c.status === "True");
}

/**
 * The class (retry, conflict, give up) comes from `classifyApiError`, the one mapping of API
 * failures in Imp. A terminal answer keeps the install-specific code `CrdRejected`, because callers
 * (the CLI, tests) tell "the server refused this CRD" apart from other terminal failures by it; its
 * message carries the server's reason (which names the offending field).
 */
export function classifyApplyError(err: unknown, name: string): ImpError {
  const classified = classifyApiError(err, { action: "apply", object: `CRD ${name}` });
  if (classified.errorClass !== "terminal" || classified.code === "CrdRejected") return classified;
  return terminalError("CrdRejected", classified.message, { cause: classified, context: { ...classified.context, apiCode: classified.code } });
}

/** The `message` of a Kubernetes Status body, which names the offending field. */
export function serverMessage(err: ApiException<unknown>): string {
  const body: unknown = err.body;
  if (typeof body === "string") {
    try {
      const parsed: unknown = JSON.parse(body);
      if (typeof parsed === "object" && parsed !== null && "message" in parsed) return String(parsed.message);
    } catch {
      return body;
    }
    return body;
  }
  if (typeof body === "object" && body !== null && "message" in body) return String(body.message);
  return err.message;
}
