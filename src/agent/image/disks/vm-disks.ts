/**
 * A VM's disks on a warm cache, in O(1) of the image size: the base image is hard-linked (not
 * copied) into the VM's directory and attached read-only; the scratch disk is a fresh empty ext4
 * (see scratch-template.ts). The hard link is the VM's reference on the cached image (see
 * cache/image-cache.ts): removing the VM's directory releases it.
 */
import { link, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import type { CachedImage } from "../cache/index.ts";
import type { ScratchMethod, ScratchSpec, ScratchTemplates } from "./scratch-template.ts";

export const BASE_DISK = "base.ext4";
export const SCRATCH_DISK = "scratch.ext4";

export interface VmDisks {
  /** Read-only base image (attach with read_only / readonly=on). */
  readonly base: string;
  /** The VM's own writable scratch disk (ext4, upper layer of the guest's overlay root). */
  readonly scratch: string;
  readonly scratchMethod: ScratchMethod | "existing";
}

/**
 * Creates `base.ext4` (hard link to the cached image) and `scratch.ext4` in `vmDir`, which must
 * exist and be on the cache's filesystem. Idempotent: disks already there are kept. `image` comes
 * from `ImageCache.ensure`/`lookup`, which already marked it used for LRU.
 */
export async function prepareVmDisks(vmDir: string, image: CachedImage, scratch: ScratchTemplates, spec: ScratchSpec): Promise<VmDisks> {
  const base = join(vmDir, BASE_DISK);
  const scratchPath = join(vmDir, SCRATCH_DISK);
  try {
    await link(image.path, base);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EXDEV") {
      throw terminalError("VmDiskCrossDevice", `Cannot reference base image ${image.key} from ${vmDir}: the VM directory is on another filesystem than the image cache`, { cause: err });
    }
    if (code === "ENOENT") throw terminalError("ImageVanished", `Cannot reference base image ${image.key}: it was evicted; ensure it again`, { cause: err, context: { key: image.key } });
    if (code !== "EEXIST" || !(await sameFile(image.path, base))) throw err;
  }
  let scratchMethod: VmDisks["scratchMethod"] = "existing";
  if ((await stat(scratchPath).catch(() => undefined)) === undefined) scratchMethod = await scratch.create(scratchPath, spec);
  return { base, scratch: scratchPath, scratchMethod };
}

/** Removes the VM's disks (releasing its reference on the base image). Idempotent. */
export async function releaseVmDisks(vmDir: string): Promise<void> {
  await rm(join(vmDir, BASE_DISK), { force: true });
  await rm(join(vmDir, SCRATCH_DISK), { force: true });
}

async function sameFile(a: string, b: string): Promise<boolean> {
  const [x, y] = await Promise.all([stat(a), stat(b)]);
  return x.ino === y.ino && x.dev === y.dev;
}
