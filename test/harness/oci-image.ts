/**
 * Builds OCI (or Docker v2) test images in memory: tar layers via tar-stream, compressed with gzip,
 * zstd or not at all, plus config, manifest and index documents with correct digests and sizes. Tests
 * push these to a real registry (test/harness/registry.ts) or write them as an OCI layout for skopeo.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { gzipSync, zstdCompressSync } from "node:zlib";
import tar from "tar-stream";

export type Compression = "gzip" | "zstd" | "none";
export type ImageFormat = "oci" | "docker";

export interface Blob {
  readonly mediaType: string;
  readonly digest: string;
  readonly size: number;
  readonly bytes: Buffer;
}

export interface LayerEntry {
  readonly path: string;
  readonly type?: "file" | "directory" | "symlink";
  readonly content?: Buffer | string;
  readonly linkname?: string;
  readonly mode?: number;
}

export interface TestPlatform {
  readonly os: string;
  readonly architecture: string;
  readonly variant?: string;
}

export interface TestImage {
  readonly manifest: Blob;
  readonly config: Blob;
  readonly layers: readonly Blob[];
  readonly platform: TestPlatform;
}

export interface TestIndex {
  readonly index: Blob;
  readonly images: readonly TestImage[];
}

export const blobOf = (mediaType: string, bytes: Buffer): Blob => ({
  mediaType,
  bytes,
  size: bytes.length,
  digest: `sha256:${createHash("sha256").update(bytes).digest("hex")}`,
});

const LAYER_TYPES: Record<ImageFormat, Record<Compression, string>> = {
  oci: {
    gzip: "application/vnd.oci.image.layer.v1.tar+gzip",
    zstd: "application/vnd.oci.image.layer.v1.tar+zstd",
    none: "application/vnd.oci.image.layer.v1.tar",
  },
  docker: {
    gzip: "application/vnd.docker.image.rootfs.diff.tar.gzip",
    zstd: "application/vnd.oci.image.layer.v1.tar+zstd",
    none: "application/vnd.oci.image.layer.v1.tar",
  },
};

/** A tar of `entries`, uncompressed. */
export async function tarOf(entries: readonly LayerEntry[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    pack.on("data", (c: unknown) => { chunks.push(c as Buffer); });
    pack.on("end", resolve);
    pack.on("error", reject);
  });
  for (const e of entries) {
    const type = e.type ?? "file";
    const header = { name: e.path, type, mode: e.mode ?? (type === "directory" ? 0o755 : 0o644), uid: 0, gid: 0, mtime: new Date(0) };
    if (type === "file") {
      const content = typeof e.content === "string" ? Buffer.from(e.content) : (e.content ?? Buffer.alloc(0));
      await new Promise<void>((resolve, reject) => pack.entry({ ...header, size: content.length }, content, (err) => (err ? reject(err) : resolve())));
    } else {
      pack.entry({ ...header, ...(e.linkname === undefined ? {} : { linkname: e.linkname }) });
    }
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** A layer blob: the tar of `entries` compressed as asked; `diffId` is the digest of the uncompressed tar. */
export async function buildLayer(entries: readonly LayerEntry[], compression: Compression = "gzip", format: ImageFormat = "oci"): Promise<Blob & { diffId: string }> {
  const raw = await tarOf(entries);
  const bytes = compression === "gzip" ? gzipSync(raw) : compression === "zstd" ? zstdCompressSync(raw) : raw;
  return { ...blobOf(LAYER_TYPES[format][compression], bytes), diffId: blobOf("", raw).digest };
}

/** A layer holding one file of incompressible random bytes (for big-blob and interruption tests). */
export const randomLayer = (bytes: number, compression: Compression = "gzip"): Promise<Blob & { diffId: string }> =>
  buildLayer([{ path: "data/random.bin", content: randomBytes(bytes), mode: 0o644 }], compression);

/** A layer with busybox-static's binary at /bin/busybox and /bin/sh -> busybox. */
export async function busyboxLayer(compression: Compression = "gzip", format: ImageFormat = "oci"): Promise<Blob & { diffId: string }> {
  const binary = await readFile("/bin/busybox");
  return buildLayer(
    [
      { path: "bin/", type: "directory" },
      { path: "bin/busybox", content: binary, mode: 0o755 },
      { path: "bin/sh", type: "symlink", linkname: "busybox" },
      { path: "etc/", type: "directory" },
      { path: "etc/hostname", content: "imp-test\n" },
    ],
    compression,
    format,
  );
}

/** An image (config + manifest) over the given layers. */
export function buildImage(layers: readonly (Blob & { diffId: string })[], options: { platform?: TestPlatform; format?: ImageFormat; cmd?: string[] } = {}): TestImage {
  const format = options.format ?? "oci";
  const platform = options.platform ?? { os: "linux", architecture: "amd64" };
  const config = blobOf(
    format === "oci" ? "application/vnd.oci.image.config.v1+json" : "application/vnd.docker.container.image.v1+json",
    Buffer.from(JSON.stringify({
      architecture: platform.architecture,
      os: platform.os,
      ...(platform.variant === undefined ? {} : { variant: platform.variant }),
      config: { Cmd: options.cmd ?? ["/bin/sh"], Env: ["PATH=/bin"] },
      rootfs: { type: "layers", diff_ids: layers.map((l) => l.diffId) },
    })),
  );
  const manifestType = format === "oci" ? "application/vnd.oci.image.manifest.v1+json" : "application/vnd.docker.distribution.manifest.v2+json";
  const manifest = blobOf(manifestType, Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: manifestType,
    config: descriptorOf(config),
    layers: layers.map(descriptorOf),
  })));
  return { manifest, config, layers, platform };
}

/** An index (or Docker manifest list) over platform images. */
export function buildIndex(images: readonly TestImage[], format: ImageFormat = "oci"): TestIndex {
  const mediaType = format === "oci" ? "application/vnd.oci.image.index.v1+json" : "application/vnd.docker.distribution.manifest.list.v2+json";
  const index = blobOf(mediaType, Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType,
    manifests: images.map((i) => ({ ...descriptorOf(i.manifest), platform: i.platform })),
  })));
  return { index, images };
}

export const descriptorOf = (b: Blob): { mediaType: string; digest: string; size: number } => ({ mediaType: b.mediaType, digest: b.digest, size: b.size });

/** Writes an OCI image layout (for skopeo/umoci) holding `target` under `tag`. */
export async function writeOciLayout(dir: string, target: TestImage | TestIndex, tag: string): Promise<void> {
  const blobsDir = join(dir, "blobs", "sha256");
  await mkdir(blobsDir, { recursive: true });
  const images = "index" in target ? target.images : [target];
  const blobs = [...images.flatMap((i) => [i.manifest, i.config, ...i.layers]), ...("index" in target ? [target.index] : [])];
  for (const b of blobs) await writeFile(join(blobsDir, b.digest.slice(7)), b.bytes);
  const top = "index" in target ? target.index : target.manifest;
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(join(dir, "index.json"), JSON.stringify({
    schemaVersion: 2,
    manifests: [{ ...descriptorOf(top), annotations: { "org.opencontainers.image.ref.name": tag } }],
  }));
}
