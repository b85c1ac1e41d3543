/**
 * The cache key of a base image: a sha256 over every input that changes the filesystem, in a fixed
 * canonical form. Anything not in here must not change the bytes of the image.
 */
import { createHash } from "node:crypto";
import { terminalError } from "../../../shared/index.ts";
import type { Ext4Params } from "../ext4/index.ts";

/**
 * The builder's format version. Bump it whenever the build changes what ends up in an image for the
 * same inputs (layer rules, injection path, mkfs/debugfs arguments), so old images are not reused.
 */
export const BUILDER_FORMAT_VERSION = "imp-ext4-2";

export interface BaseImageKeyInput {
  /**
   * Layers in application order (the image's layers, then extra layers such as the runner layer):
   * digest and media type, which says how the blob is decompressed.
   */
  readonly layers: readonly { readonly digest: string; readonly mediaType: string }[];
  readonly guestAgentDigest: string;
  readonly params: Ext4Params;
  /** The e2fsprogs version and mke2fs config hash (`mkfsIdentity()`): what mkfs does beyond our arguments. */
  readonly mkfs: string;
  readonly formatVersion?: string;
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** `sha256:`-less hex key, safe as a directory name. Throws on malformed digests. */
export function baseImageKey(input: BaseImageKeyInput): string {
  for (const digest of [...input.layers.map((l) => l.digest), input.guestAgentDigest]) {
    if (!DIGEST.test(digest)) throw terminalError("UnsupportedDigest", `Cannot compute an image cache key: ${JSON.stringify(digest)} is not a sha256 digest`, { context: { digest } });
  }
  const p = input.params;
  const canonical = JSON.stringify({
    format: input.formatVersion ?? BUILDER_FORMAT_VERSION,
    layers: input.layers.map((l) => [l.digest, l.mediaType]),
    guest: input.guestAgentDigest,
    fs: [p.blockSize, p.inodeSize, p.journal, p.headroomRatio, p.headroomBytes],
    mkfs: input.mkfs,
  });
  return createHash("sha256").update(canonical).digest("hex");
}

/** `sha256:<hex>` of a file's bytes (the guest agent binary). */

/** A UUID derived from the key, so an image's filesystem UUID is reproducible. */
export function uuidOfKey(key: string): string {
  const h = key.slice(0, 32);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
