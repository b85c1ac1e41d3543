/**
 * A layer from a local file (e.g. a runner layer built on this machine): digest computed from the
 * bytes, media type from the magic number (gzip, zstd, else plain tar).
 */
import { createReadStream } from "node:fs";
import { open, stat } from "node:fs/promises";
import { fileDigestOf } from "./file-digest.ts";
import type { LayerBlob } from "./apply-layer.ts";

export async function localLayer(path: string): Promise<LayerBlob> {
  const handle = await open(path, "r");
  const magic = Buffer.alloc(4);
  try {
    await handle.read(magic, 0, 4, 0);
  } finally {
    await handle.close();
  }
  const mediaType = magic[0] === 0x1f && magic[1] === 0x8b
    ? "application/vnd.oci.image.layer.v1.tar+gzip"
    : magic.equals(Buffer.from([0x28, 0xb5, 0x2f, 0xfd]))
      ? "application/vnd.oci.image.layer.v1.tar+zstd"
      : "application/vnd.oci.image.layer.v1.tar";
  return { digest: await fileDigestOf(path), mediaType, size: (await stat(path)).size, open: () => Promise.resolve(createReadStream(path)) };
}
