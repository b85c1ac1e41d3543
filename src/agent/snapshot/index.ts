// The node's memory snapshots of template VMs: keys, verified lookup, single-flight builds, atomic publish, eviction.
export { snapshotKey, type SnapshotKeyInput } from "./snapshot-key.ts";
export { snapshotDiskReserveBytes, SnapshotStore, type FindResult, type SnapshotBuilder, type SnapshotFiles, type SnapshotMeta, type SnapshotStoreOptions, type TemplateSnapshot } from "./snapshot-store.ts";
