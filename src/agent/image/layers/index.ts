/** Confined application of OCI layers to a directory. */
export { applyLayer, type LayerBlob, type LayerStats } from "./apply-layer.ts";
export { ConfinedTree, type EntryMeta, type SpecialKind, type SpecialNode, type Xattrs } from "./confined-tree.ts";
export { compressionOf, decompressor, type LayerCompression } from "./decompress.ts";
export { entryMeaning, parseEntryPath, type EntryMeaning, type EntryPath } from "./entry-path.ts";
export { defaultLayerLimits, LayerBudget, stagingCapBytes, type LayerLimits } from "./limits.ts";
export { GUEST_AGENT_DIR, GUEST_AGENT_INIT, GUEST_AGENT_NAME, unpackRootfs, type UnpackedRootfs, type UnpackOptions } from "./unpack-rootfs.ts";
export { layerBlobsOf } from "./from-store.ts";
export { fileDigestOf } from "./file-digest.ts";
export { localLayer } from "./local-layer.ts";
