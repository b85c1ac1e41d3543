/**
 * Filesystem parameters of the images we build, and the pure sizing rule. The parameters are part
 * of the cache key: changing any of them builds new images instead of reusing old ones.
 */

export interface Ext4Params {
  readonly blockSize: 1024 | 2048 | 4096;
  readonly inodeSize: 128 | 256;
  /** A base image is mounted read-only, so it needs no journal; scratch disks may want one. */
  readonly journal: boolean;
  /** Free space added on top of the content estimate, as a fraction of it. */
  readonly headroomRatio: number;
  /** Free space added on top of the content estimate, in bytes. */
  readonly headroomBytes: number;
}

/** Parameters of base images (read-only lower layer of the guest's overlay root). */
export function defaultBaseParams(): Ext4Params {
  return { blockSize: 4096, inodeSize: 256, journal: false, headroomRatio: 0.1, headroomBytes: 32 * 1024 ** 2 };
}

export interface Ext4Plan {
  readonly sizeBytes: number;
  readonly inodes: number;
}

const MIB = 1024 ** 2;

/**
 * Size and inode count for content of `entries` entries holding `fileBytes` bytes. Both inputs are
 * upper bounds (summed over layers), and the image file is sparse, so overestimating costs little.
 */
export function planExt4(content: { readonly entries: number; readonly fileBytes: number }, params: Ext4Params): Ext4Plan {
  const perEntry = params.blockSize + params.inodeSize;
  const content_ = content.fileBytes + content.entries * perEntry;
  const withHeadroom = content_ * (1 + params.headroomRatio) + params.headroomBytes;
  // ext4 needs room for its own metadata (group descriptors, bitmaps, directories): ~3% plus a floor.
  const sizeBytes = Math.ceil((withHeadroom * 1.03 + 8 * MIB) / MIB) * MIB;
  const inodes = Math.ceil(content.entries * 1.1) + 1024;
  return { sizeBytes, inodes };
}
