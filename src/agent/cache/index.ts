// A pool's cache volume on a node: generations, per-VM copy-on-write clones, promotion (docs/caches.md).
export { cloneGeneration, createEmptyGeneration, generationFileName, promoteClone, sweepPartials, type CacheToolOptions } from "./cache-volume.ts";
export { CacheVolumes, type CacheClone, type CacheVolumeRef, type HeldClone } from "./cache-volumes.ts";
