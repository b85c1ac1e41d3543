/**
 * Manifest documents are untrusted input: `parseManifestDocument` accepts only the OCI and Docker v2
 * image manifest and index formats, checks every descriptor (sha256 digest, integer size), bounds the
 * number of entries, and says clearly what it rejects.
 */
import { terminalError } from "../../../shared/index.ts";
import { checkSize, sha256Hex } from "../store/index.ts";
import type { Descriptor, Platform } from "./types.ts";

export const MediaTypes = {
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  ociIndex: "application/vnd.oci.image.index.v1+json",
  ociConfig: "application/vnd.oci.image.config.v1+json",
  ociLayer: "application/vnd.oci.image.layer.v1.tar",
  ociLayerGzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  ociLayerZstd: "application/vnd.oci.image.layer.v1.tar+zstd",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  dockerManifestList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerConfig: "application/vnd.docker.container.image.v1+json",
  dockerLayerGzip: "application/vnd.docker.image.rootfs.diff.tar.gzip",
} as const;

/** Every manifest type we can use, for the Accept header. */
export const MANIFEST_ACCEPT = [MediaTypes.ociIndex, MediaTypes.dockerManifestList, MediaTypes.ociManifest, MediaTypes.dockerManifest].join(", ");

const LAYER_TYPES: ReadonlySet<string> = new Set([
  MediaTypes.ociLayer, MediaTypes.ociLayerGzip, MediaTypes.ociLayerZstd, MediaTypes.dockerLayerGzip,
]);
const CONFIG_TYPES: ReadonlySet<string> = new Set([MediaTypes.ociConfig, MediaTypes.dockerConfig]);
const MAX_ENTRIES = 1000;

export interface IndexEntry extends Descriptor {
  readonly platform?: Platform;
}

export type ManifestDocument =
  | { readonly kind: "index"; readonly mediaType: string; readonly manifests: readonly IndexEntry[] }
  | { readonly kind: "manifest"; readonly mediaType: string; readonly config: Descriptor; readonly layers: readonly Descriptor[] };

/** Parses manifest bytes; `contentType` is the response's Content-Type, used when the body has no mediaType. */
export function parseManifestDocument(bytes: Uint8Array, contentType: string | undefined, what: string): ManifestDocument {
  const bad = (why: string): Error => terminalError("InvalidManifest", `Cannot use manifest of ${what}: ${why}`);
  let doc: unknown;
  try {
    doc = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    throw bad("it is not JSON");
  }
  if (!isObject(doc)) throw bad("it is not a JSON object");
  if (doc.schemaVersion !== 2) throw bad(`schemaVersion ${String(doc.schemaVersion)} is not supported (only 2)`);
  const headerType = contentType?.split(";")[0]?.trim();
  const mediaType = typeof doc.mediaType === "string" ? doc.mediaType : headerType ?? "";
  const looksLikeIndex = Array.isArray(doc.manifests);
  if (mediaType === MediaTypes.ociIndex || mediaType === MediaTypes.dockerManifestList || (mediaType === "" && looksLikeIndex)) {
    if (!Array.isArray(doc.manifests)) throw bad("an index without a manifests list");
    if (doc.manifests.length > MAX_ENTRIES) throw bad(`${doc.manifests.length} entries is more than ${MAX_ENTRIES}`);
    const manifests = doc.manifests.map((m, i) => indexEntry(m, `${what} manifests[${i}]`));
    return { kind: "index", mediaType: mediaType === "" ? MediaTypes.ociIndex : mediaType, manifests };
  }
  if (mediaType === MediaTypes.ociManifest || mediaType === MediaTypes.dockerManifest || (mediaType === "" && isObject(doc.config))) {
    const config = descriptor(doc.config, `${what} config`);
    if (!CONFIG_TYPES.has(config.mediaType)) throw bad(`config type ${config.mediaType} is not a container image config (an artifact?)`);
    if (!Array.isArray(doc.layers)) throw bad("a manifest without a layers list");
    if (doc.layers.length > MAX_ENTRIES) throw bad(`${doc.layers.length} layers is more than ${MAX_ENTRIES}`);
    const layers = doc.layers.map((l, i) => descriptor(l, `${what} layers[${i}]`));
    for (const layer of layers) {
      if (!LAYER_TYPES.has(layer.mediaType)) {
        throw bad(`layer ${layer.digest} has media type ${layer.mediaType}; supported: ${[...LAYER_TYPES].join(", ")}`);
      }
    }
    return { kind: "manifest", mediaType: mediaType === "" ? MediaTypes.ociManifest : mediaType, config, layers };
  }
  throw bad(`media type ${JSON.stringify(mediaType)} is not an OCI or Docker v2 image manifest or index`);
}

function descriptor(value: unknown, what: string): Descriptor {
  if (!isObject(value)) throw terminalError("InvalidManifest", `Cannot use ${what}: not a descriptor object`);
  if (typeof value.mediaType !== "string" || value.mediaType.length > 256) {
    throw terminalError("InvalidManifest", `Cannot use ${what}: mediaType missing or too long`);
  }
  if (typeof value.digest !== "string") throw terminalError("InvalidManifest", `Cannot use ${what}: digest missing`);
  sha256Hex(value.digest);
  const size = checkSize(value.size, what);
  if (Array.isArray(value.urls) && value.urls.length > 0) {
    throw terminalError("InvalidManifest", `Cannot use ${what}: it points at foreign URLs, which Imp never fetches`);
  }
  return { mediaType: value.mediaType, digest: value.digest, size };
}

function indexEntry(value: unknown, what: string): IndexEntry {
  const base = descriptor(value, what);
  const platform = isObject(value) && isObject(value.platform) ? value.platform : undefined;
  if (platform === undefined || typeof platform.os !== "string" || typeof platform.architecture !== "string") return base;
  return {
    ...base,
    platform: {
      os: platform.os,
      architecture: platform.architecture,
      ...(typeof platform.variant === "string" ? { variant: platform.variant } : {}),
    },
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
