/**
 * The Imp API (group imp.dev, version v1alpha1): TypeScript types and TypeBox schemas of every
 * kind, the CRDs generated from them, names (labels, finalizers, …). No I/O: src/kube's `installCrds` applies the CRDs.
 * Other parts import only from here.
 */
export * from "./constants.ts";
export * from "./schema/common.ts";
export * from "./schema/kind.ts";
export * from "./schema/impvmclass.ts";
export * from "./schema/impvmtemplate.ts";
export * from "./schema/impvm.ts";
export * from "./phases.ts";
export * from "./schema/impvmrunnerpool.ts";
export * from "./schema/impnode.ts";
export * from "./schema/cache.ts";
export { KIND_DEFINITIONS } from "./schema/index.ts";
export { buildCrd, buildAllCrds, type CrdManifest, type CrdVersion } from "./crd.ts";
export { CRD_DIR, crdFileName, renderCrdFiles, renderCrdYaml } from "./render.ts";
export { REFERENCE_DOC_PATH, renderReferenceDoc } from "./reference-doc.ts";
export { SchemaError, structuralViolations, toK8sSchema, type JsonSchema } from "./structural.ts";
export { parseDurationMs, parseSizeMiB } from "./units.ts";
export * from "./setup-seal.ts";
export * from "./vm-inputs.ts";
export { holdsSealed, withoutSealed } from "./sealed-status.ts";
export { API_ERROR_CODES } from "./error-codes.ts";
