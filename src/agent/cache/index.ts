// A pool's cache volume on a node: generations, per-VM copy-on-write clones, promotion (not yet wired to VMs).
export { cloneGeneration, createEmptyGeneration, generationFileName, promoteClone, sweepPartials, type CacheToolOptions } from "./cache-volume.ts";
