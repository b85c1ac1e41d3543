/**
 * Chooses the decompressor from the layer's media type (OCI image-spec media-types.md plus the Docker
 * v2 names). The media type comes from a verified manifest, so it is trusted to name the format; a blob
 * that does not match its media type fails inside the decompressor with its own error.
 */
import type { Transform } from "node:stream";
import { PassThrough } from "node:stream";
import { createGunzip, createZstdDecompress } from "node:zlib";
import { terminalError } from "../../../shared/index.ts";

export type LayerCompression = "none" | "gzip" | "zstd";

const byMediaType: Readonly<Record<string, LayerCompression>> = {
  "application/vnd.oci.image.layer.v1.tar": "none",
  "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
  "application/vnd.oci.image.layer.v1.tar+zstd": "zstd",
  "application/vnd.oci.image.layer.nondistributable.v1.tar": "none",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
  "application/vnd.docker.image.rootfs.diff.tar": "none",
  "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
  "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
  "application/vnd.docker.image.rootfs.diff.tar.zstd": "zstd",
};

/** The compression a layer media type names; throws `UnsupportedLayerMediaType` for anything else. */
export function compressionOf(mediaType: string): LayerCompression {
  const found = byMediaType[mediaType];
  if (found === undefined) {
    throw terminalError("UnsupportedLayerMediaType", `Cannot apply layer: media type ${JSON.stringify(mediaType)} is not a supported layer format`, {
      context: { mediaType },
    });
  }
  return found;
}

/** A fresh decompressing stream for the compression (Node 24's zlib has zstd built in). */
export function decompressor(compression: LayerCompression): Transform {
  switch (compression) {
    case "none":
      return new PassThrough();
    case "gzip":
      return createGunzip({ chunkSize: 256 * 1024 });
    case "zstd":
      return createZstdDecompress({ chunkSize: 256 * 1024 });
  }
}
