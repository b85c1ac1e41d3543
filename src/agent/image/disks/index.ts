/** Per-VM disks: the cached base read-only by hard link, plus a fresh scratch ext4. */
export { ScratchTemplates, type ScratchMethod, type ScratchSpec, type ScratchTemplatesOptions } from "./scratch-template.ts";
export { BASE_DISK, prepareVmDisks, releaseVmDisks, SCRATCH_DISK, type VmDisks } from "./vm-disks.ts";
