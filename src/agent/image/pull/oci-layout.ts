/**
 * Images from the local disk instead of a registry, named as skopeo names them: `oci:DIR[:TAG]`, an
 * OCI image layout directory (index.json, oci-layout, blobs/sha256/…), and `oci-archive:FILE[:TAG]`,
 * the same layout in a tar file. The layout answers the puller's two questions (a manifest by tag or
 * digest, a blob by descriptor) so the pull's platform choice, size limits and digest checks apply
 * to it unchanged: a layout is as untrusted as a registry.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, mkdtemp, open, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pipeline } from "node:stream/promises";
import { extract } from "tar-stream";
import { terminalError } from "../../../shared/index.ts";
import type { ContentStore } from "../store/index.ts";
import { MAX_MANIFEST_BYTES, type FetchedManifest } from "./registry-client.ts";
import type { Descriptor } from "./types.ts";

const REF_NAME = "org.opencontainers.image.ref.name";
const DIGEST = /^sha256:[0-9a-f]{64}$/;

export interface LayoutReference {
  readonly kind: "oci" | "oci-archive";
  /** The directory or tar file, absolute. */
  readonly path: string;
  /** The tag (`org.opencontainers.image.ref.name`); undefined: the layout's only manifest. */
  readonly tag?: string;
}

/** `oci:DIR[:TAG]` / `oci-archive:FILE[:TAG]`, or undefined for any other reference (a registry's). */
export function parseLayoutReference(reference: string): LayoutReference | undefined {
  const m = /^(oci|oci-archive):(.*)$/.exec(reference);
  if (m === null) return undefined;
  const kind = m[1] as LayoutReference["kind"];
  const rest = m[2] ?? "";
  const colon = rest.lastIndexOf(":");
  const path = colon > 0 ? rest.slice(0, colon) : rest;
  const tag = colon > 0 ? rest.slice(colon + 1) : undefined;
  if (path === "" || tag === "") throw terminalError("InvalidReference", `Cannot use image ${JSON.stringify(reference)}: write ${kind}:PATH or ${kind}:PATH:TAG`);
  return { kind, path: resolve(path), ...(tag === undefined ? {} : { tag }) };
}

/** An OCI image layout directory as the puller's source of manifests and blobs. */
export class OciLayoutSource {
  readonly name: string;
  readonly #dir: string;
  readonly #tag: string | undefined;

  constructor(dir: string, tag: string | undefined, name: string) {
    this.#dir = dir;
    this.#tag = tag;
    this.name = name;
  }

  /** What the pull starts from: the tag's (or the only) entry of index.json, as a digest. */
  async top(): Promise<string> {
    let index: { manifests?: unknown };
    try {
      index = JSON.parse(await readFile(join(this.#dir, "index.json"), "utf8")) as { manifests?: unknown };
    } catch (err) {
      throw terminalError("NotFound", `Cannot read image ${this.name}: no OCI layout index at ${join(this.#dir, "index.json")} (${(err as Error).message})`, { cause: err });
    }
    const entries = Array.isArray(index.manifests) ? (index.manifests as Descriptor[]) : [];
    const tagged = this.#tag === undefined ? entries : entries.filter((e) => e.annotations?.[REF_NAME] === this.#tag);
    if (tagged.length !== 1 || typeof tagged[0]?.digest !== "string" || !DIGEST.test(tagged[0].digest)) {
      const tags = entries.map((e) => e.annotations?.[REF_NAME]).filter((t) => t !== undefined);
      throw terminalError("NotFound", `Cannot read image ${this.name}: ${this.#tag === undefined ? `the layout holds ${entries.length} images; name one by tag` : `no single image tagged ${this.#tag}`} (tags: ${tags.join(", ") || "none"})`);
    }
    return tagged[0].digest;
  }

  async getManifest(digest: string): Promise<FetchedManifest> {
    if (!DIGEST.test(digest)) throw terminalError("InvalidReference", `Cannot read a manifest of ${this.name} by ${JSON.stringify(digest)}: only sha256 digests name blobs in a layout`);
    const bytes = await this.#readBlob(digest, MAX_MANIFEST_BYTES);
    const actual = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    if (actual !== digest) throw terminalError("DigestMismatch", `Cannot read manifest ${digest} of ${this.name}: its content hashes to ${actual}`, { context: { expected: digest, actual } });
    // A layout carries no Content-Type: the document's own mediaType says what it is.
    return { bytes, contentType: undefined, digest };
  }

  /** Copies a blob into the store, which checks its size and digest as it streams. */
  async fetchBlob(blob: Descriptor, store: ContentStore, options: { readonly signal?: AbortSignal; readonly onBytes?: (received: number) => void } = {}): Promise<void> {
    if (!DIGEST.test(blob.digest)) throw terminalError("InvalidReference", `Cannot read blob ${JSON.stringify(blob.digest)} of ${this.name}: not a sha256 digest`);
    const stream = createReadStream(this.#blobPath(blob.digest), options.signal === undefined ? {} : { signal: options.signal });
    // Counted as the store reads them: a "data" listener would start the flow before the store listens.
    const counted = async function* (): AsyncGenerator<Uint8Array> {
      let received = 0;
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        options.onBytes?.((received += chunk.length));
        yield chunk;
      }
    };
    await store.write({ digest: blob.digest, size: blob.size }, counted()).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") throw terminalError("BlobNotFound", `Cannot read blob ${blob.digest} of ${this.name}: the layout does not hold it`, { cause: err });
      throw err;
    });
  }

  #blobPath(digest: string): string {
    return join(this.#dir, "blobs", "sha256", digest.slice("sha256:".length));
  }

  async #readBlob(digest: string, maxBytes: number): Promise<Buffer> {
    let handle;
    try {
      handle = await open(this.#blobPath(digest), "r");
    } catch (err) {
      throw terminalError("BlobNotFound", `Cannot read ${digest} of ${this.name}: the layout does not hold it`, { cause: err });
    }
    try {
      const { size } = await handle.stat();
      if (size > maxBytes) throw terminalError("ManifestTooLarge", `Cannot read ${digest} of ${this.name}: ${size} bytes is over ${maxBytes}`);
      return await handle.readFile();
    } finally {
      await handle.close();
    }
  }
}

async function copyEntry(body: AsyncIterable<Uint8Array>, path: string): Promise<void> {
  const handle = await open(path, "wx", 0o600);
  try {
    for await (const chunk of body) await handle.write(chunk);
  } finally {
    await handle.close();
  }
}

/** The files of an OCI layout; nothing else in an archive is unpacked (no path of the archive's choosing). */
const LAYOUT_ENTRY = /^(?:\.\/)?(index\.json|oci-layout|blobs\/sha256\/[0-9a-f]{64})$/;

/**
 * Unpacks the layout files of an `oci-archive:` tar into a fresh temporary directory; the caller
 * removes it. Directories and any other entry are skipped: names are matched, never joined as given.
 */
export async function unpackLayoutArchive(file: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "imp-oci-archive-"));
  try {
    await mkdir(join(dir, "blobs", "sha256"), { recursive: true });
    const untar = extract();
    const copies: Promise<void>[] = [];
    untar.on("entry", (header, body, next) => {
      const m = header.type === "file" ? LAYOUT_ENTRY.exec(header.name) : null;
      if (m === null) {
        body.on("end", next).resume();
        return;
      }
      // tar-stream's entries are streamx streams: copied chunk by chunk into a file handle, which is
      // closed (all bytes written) before the next entry is asked for.
      const copy = copyEntry(body as AsyncIterable<Uint8Array>, join(dir, m[1] ?? ""));
      copies.push(copy);
      copy.then(() => next(), next);
    });
    await pipeline(createReadStream(file), untar);
    // The extractor can finish before the last entry's copy has closed its file.
    await Promise.all(copies);
    return dir;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw terminalError("NotFound", `Cannot read image archive ${file}: ${(err as Error).message}`, { cause: err });
  }
}
