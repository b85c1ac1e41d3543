/**
 * Builds the CustomResourceDefinition of each Imp kind from its TypeBox definition. This is the only
 * place CRDs are produced: `scripts/gen-crds.ts` writes them to deploy/crds/ and `installCrds`
 * applies the same in-memory objects, so the committed YAML and what the code installs cannot differ
 * (the drift test compares them).
 */
import { API_VERSION, CATEGORY, crdName, GROUP, VERSION } from "./constants.ts";
import type { KindDefinition } from "./schema/kind.ts";
import { KIND_DEFINITIONS } from "./schema/index.ts";
import { structuralViolations, toK8sSchema, type JsonSchema } from "./structural.ts";

/** A CRD as plain JSON (wire names such as `x-kubernetes-validations`, not client model names). */
export interface CrdManifest {
  apiVersion: "apiextensions.k8s.io/v1";
  kind: "CustomResourceDefinition";
  metadata: { name: string; labels: Record<string, string> };
  spec: {
    group: string;
    names: { kind: string; listKind: string; plural: string; singular: string; shortNames: string[]; categories: string[] };
    scope: "Cluster" | "Namespaced";
    versions: CrdVersion[];
  };
}

export interface CrdVersion {
  name: string;
  served: boolean;
  storage: boolean;
  schema: { openAPIV3Schema: JsonSchema };
  subresources?: { status: Record<string, never> };
  additionalPrinterColumns: JsonSchema[];
  selectableFields?: { jsonPath: string }[];
}

/** Builds one kind's CRD. Throws if its schema is not structural. */
export function buildCrd(def: KindDefinition): CrdManifest {
  const n = def.names;
  const properties: Record<string, JsonSchema> = {
    apiVersion: { type: "string", description: `Always ${API_VERSION}.` },
    kind: { type: "string", description: `Always ${n.kind}.` },
    metadata:
      def.nameSchema === undefined
        ? { type: "object" }
        : { type: "object", properties: { name: { type: "string", ...def.nameSchema } } },
    spec: toK8sSchema(def.spec, `${n.kind}.spec`),
  };
  if (def.status !== undefined) properties["status"] = toK8sSchema(def.status, `${n.kind}.status`);
  const root: JsonSchema = { type: "object", description: def.description, required: ["spec"], properties };
  if (def.objectRules !== undefined && def.objectRules.length > 0) root["x-kubernetes-validations"] = def.objectRules.map((r) => ({ ...r }));

  const problems = structuralViolations(root, n.kind);
  if (problems.length > 0) throw new Error(`Cannot build CRD ${crdName(n)}: schema is not structural: ${problems.join("; ")}`);

  const version: CrdVersion = {
    name: VERSION,
    served: true,
    storage: true,
    schema: { openAPIV3Schema: root },
    additionalPrinterColumns: def.printerColumns.map((c) => ({ ...c })),
  };
  if (def.status !== undefined) version.subresources = { status: {} };
  if (def.selectableFields !== undefined) version.selectableFields = def.selectableFields.map((jsonPath) => ({ jsonPath }));

  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: crdName(n), labels: { "app.kubernetes.io/part-of": "imp" } },
    spec: {
      group: GROUP,
      names: { kind: n.kind, listKind: n.listKind, plural: n.plural, singular: n.singular, shortNames: [...n.shortNames], categories: [CATEGORY] },
      scope: n.scope,
      versions: [version],
    },
  };
}

/** Every Imp CRD, in install order. */
export function buildAllCrds(): CrdManifest[] {
  return KIND_DEFINITIONS.map(buildCrd);
}
