/** Per-VM disks (DESIGN §4): the cached base read-only by hard link, plus a fresh scratch ext4. */
export { ScratchTemplates, type ScratchSpec } from "./scratch-template.ts";
export { BASE_DISK, prepareVmDisks, releaseVmDisks, SCRATCH_DISK, type VmDisks } from "./vm-disks.ts";
