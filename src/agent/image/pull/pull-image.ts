/**
 * `ImagePuller.pull(reference)`: resolve the reference to the node's platform manifest, then fetch the
 * config and layers into the content store (layers concurrently, bounded), each verified by digest and
 * size while it streams. The index (if any) and manifest bytes are stored too, so the build side can
 * re-read exactly what was pulled. A puller keeps registry tokens cached across pulls.
 */
import { rm } from "node:fs/promises";
import { Readable } from "node:stream";
import type { BackoffPolicy, Clock } from "../../../shared/index.ts";
import { describeError, systemClock, terminalError } from "../../../shared/index.ts";
import type { ContentStore } from "../store/index.ts";
import { ImageRefs } from "../store/index.ts";
import { parseManifestDocument, type ManifestDocument } from "./media-types.ts";
import { formatPlatform, nodePlatform, selectPlatform } from "./platform.ts";
import { OciLayoutSource, parseLayoutReference, unpackLayoutArchive } from "./oci-layout.ts";
import { formatReference, parseReference } from "./reference.ts";
import { RegistryAuth } from "./registry-auth.ts";
import { RegistryClient, type FetchedManifest } from "./registry-client.ts";
import type { CredentialLookup, Descriptor, ImageConfig, Platform, PulledImage, PullOptions } from "./types.ts";
import { mapBounded } from "./pool.ts";

export interface PullerOptions {
  readonly credentials?: CredentialLookup;
  readonly clock?: Clock;
  readonly fetch?: typeof fetch;
  /** Registries spoken to over plain HTTP; default: loopback ones only. */
  readonly plainHttp?: (registry: string) => boolean;
  /** Completes references that name no registry; unset means such references are rejected. */
  readonly defaultRegistry?: string;
  readonly retryPolicy?: BackoffPolicy;
  readonly retryAfterCapMs?: number;
  readonly idleTimeoutMs?: number;
  /** Largest total of config + layer sizes we agree to pull. */
  readonly maxImageBytes?: number;
  /** Record each pulled reference under `<store root>/refs` for `imp image ls` (default true). */
  readonly recordRefs?: boolean;
}

const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

/** Where one image's manifests and blobs come from: a registry, or an OCI layout on disk (`oci-layout.ts`). */
interface ImageSource {
  /** The image's name in messages and records. */
  readonly name: string;
  /** The tag or digest the pull starts from. */
  top(): Promise<string>;
  getManifest(tagOrDigest: string, signal?: AbortSignal): Promise<FetchedManifest>;
  fetchBlob(blob: Descriptor, store: ContentStore, options: { readonly signal?: AbortSignal; readonly onBytes?: (received: number) => void }): Promise<void>;
}
const DEFAULT_MAX_IMAGE_BYTES = 64 * 1024 ** 3;

export class ImagePuller {
  readonly #options: PullerOptions;
  readonly auth: RegistryAuth;

  constructor(options: PullerOptions = {}) {
    this.#options = options;
    const clock = options.clock ?? systemClock;
    this.auth = new RegistryAuth({
      clock,
      ...(options.credentials === undefined ? {} : { credentials: options.credentials }),
      ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
      ...(options.plainHttp === undefined ? {} : { plainHttp: options.plainHttp }),
    });
  }

  /**
   * Pulls `reference` for `options.platform` into `options.store`. Rejects with a classified `ImpError`
   * (terminal: bad reference, auth, not found, no platform, digest/size mismatch; retryable: the
   * registry stayed unavailable through every retry), or with the signal's reason when aborted.
   */
  async pull(reference: string, options: Omit<PullOptions, "auth">): Promise<PulledImage> {
    const layout = parseLayoutReference(reference);
    const unpacked = layout?.kind === "oci-archive" ? await unpackLayoutArchive(layout.path) : undefined;
    try {
      return await this.#pull(layout === undefined ? this.#registrySource(reference, options) : new OciLayoutSource(unpacked ?? layout.path, layout.tag, reference), options);
    } catch (err) {
      if (options.signal?.aborted === true) throw options.signal.reason;
      throw err;
    } finally {
      if (unpacked !== undefined) await rm(unpacked, { recursive: true, force: true });
    }
  }

  /** A registry as the source of one image's manifests and blobs. */
  #registrySource(reference: string, options: Omit<PullOptions, "auth">): ImageSource {
    const ref = parseReference(reference, this.#options.defaultRegistry);
    const client = this.#client(options);
    return {
      name: formatReference(ref),
      top: async () => ref.digest ?? (ref.tag as string),
      getManifest: (tagOrDigest, signal) => client.getManifest(ref.registry, ref.repository, tagOrDigest, signal),
      fetchBlob: (blob, store, o) => client.fetchBlob(ref.registry, ref.repository, blob, store, o),
    };
  }

  async #pull(source: ImageSource, options: Omit<PullOptions, "auth">): Promise<PulledImage> {
    const name = source.name;
    const platform = options.platform ?? nodePlatform();
    const signal = options.signal;
    const store = options.store;

    const top = await source.getManifest(await source.top(), signal);
    let doc = parseManifestDocument(top.bytes, top.contentType, name);
    let manifest: FetchedManifest = top;
    let indexDigest: string | undefined;
    let chosenPlatform: Platform | undefined;
    if (doc.kind === "index") {
      indexDigest = top.digest;
      const entry = selectPlatform(doc.manifests, platform, name);
      chosenPlatform = entry.platform;
      manifest = await source.getManifest(entry.digest, signal);
      if (manifest.bytes.byteLength !== entry.size) {
        throw terminalError("SizeMismatch", `Cannot pull ${name}: manifest ${entry.digest} has ${manifest.bytes.byteLength} bytes, the index says ${entry.size}`);
      }
      doc = parseManifestDocument(manifest.bytes, manifest.contentType, `${name} (${formatPlatform(entry.platform)})`);
      if (doc.kind !== "manifest") throw terminalError("InvalidManifest", `Cannot pull ${name}: the index entry for ${formatPlatform(platform)} is itself an index`);
      await storeBytes(store, top);
    }
    const image = doc as ManifestDocument & { kind: "manifest" };
    this.#checkTotal(name, image);
    await storeBytes(store, manifest);

    if (image.config.size > MAX_CONFIG_BYTES) throw terminalError("ConfigTooLarge", `Cannot pull ${name}: config of ${image.config.size} bytes is over ${MAX_CONFIG_BYTES}`);
    await source.fetchBlob(image.config, store, signal === undefined ? {} : { signal });
    const config = parseConfig(await store.readBytes(image.config.digest, MAX_CONFIG_BYTES), name);
    const imagePlatform = chosenPlatform ?? platformOfConfig(config, platform);
    if (imagePlatform.os !== platform.os || imagePlatform.architecture !== platform.architecture) {
      throw terminalError("NoMatchingPlatform", `Cannot pull ${name}: the image is for ${formatPlatform(imagePlatform)}, this node is ${formatPlatform(platform)}`);
    }

    const layers = image.layers.map((l) => ({ digest: l.digest, size: l.size, mediaType: l.mediaType }));
    options.onProgress?.({ kind: "resolved", reference: name, manifestDigest: manifest.digest, layers });
    const unique = [...new Map(image.layers.map((l) => [l.digest, l])).values()];
    await mapBounded(unique, options.concurrency ?? 3, (layer, sig) => this.#fetchLayer(source, layer, store, options, sig), signal);

    const pulled: PulledImage = {
      reference: name,
      manifestDigest: manifest.digest,
      ...(indexDigest === undefined ? {} : { indexDigest }),
      platform: imagePlatform,
      configDigest: image.config.digest,
      config,
      layers,
    };
    if (this.#options.recordRefs ?? true) await new ImageRefs(store.root).put({ ...pulled, pulledAt: new Date((this.#options.clock ?? systemClock).now()).toISOString() });
    return pulled;
  }

  async #fetchLayer(source: ImageSource, layer: Descriptor, store: ContentStore, options: Omit<PullOptions, "auth">, signal: AbortSignal): Promise<void> {
    const progress = options.onProgress;
    if (await store.has(layer.digest)) {
      progress?.({ kind: "layer-cached", digest: layer.digest, size: layer.size });
      return;
    }
    progress?.({ kind: "layer-start", digest: layer.digest, size: layer.size });
    await source.fetchBlob(layer, store, {
      signal,
      onBytes: (received) => progress?.({ kind: "layer-bytes", digest: layer.digest, received, size: layer.size }),
    });
    progress?.({ kind: "layer-done", digest: layer.digest, size: layer.size });
  }

  #client(options: Omit<PullOptions, "auth">): RegistryClient {
    const o = this.#options;
    return new RegistryClient({
      auth: this.auth,
      clock: o.clock ?? systemClock,
      ...(o.fetch === undefined ? {} : { fetch: o.fetch }),
      ...(o.plainHttp === undefined ? {} : { plainHttp: o.plainHttp }),
      ...(o.retryPolicy === undefined ? {} : { retryPolicy: o.retryPolicy }),
      ...(o.retryAfterCapMs === undefined ? {} : { retryAfterCapMs: o.retryAfterCapMs }),
      ...(o.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: o.idleTimeoutMs }),
      onRetry: (what, attempt, delayMs, error) => options.onProgress?.({ kind: "retry", what, attempt, delayMs, error: describeError(error) }),
    });
  }

  #checkTotal(name: string, image: ManifestDocument & { kind: "manifest" }): void {
    const total = image.config.size + image.layers.reduce((sum, l) => sum + l.size, 0);
    const max = this.#options.maxImageBytes ?? DEFAULT_MAX_IMAGE_BYTES;
    if (total > max) throw terminalError("ImageTooLarge", `Cannot pull ${name}: ${total} bytes is more than the limit of ${max}`);
  }
}

/** One-off pull with a fresh token cache; long-lived callers (the agent) keep an `ImagePuller`. */
export async function pullImage(reference: string, options: PullOptions & Omit<PullerOptions, "credentials">): Promise<PulledImage> {
  const { auth, ...rest } = options;
  return new ImagePuller({ ...rest, ...(auth === undefined ? {} : { credentials: auth }) }).pull(reference, rest);
}

async function storeBytes(store: ContentStore, fetched: FetchedManifest): Promise<void> {
  await store.write({ digest: fetched.digest, size: fetched.bytes.byteLength }, Readable.from([Buffer.from(fetched.bytes)]));
}

function parseConfig(bytes: Buffer, name: string): ImageConfig {
  try {
    const parsed: unknown = JSON.parse(bytes.toString("utf8"));
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed as ImageConfig;
  } catch {
    // fall through to the error below
  }
  throw terminalError("InvalidConfig", `Cannot pull ${name}: the image config is not a JSON object`);
}

function platformOfConfig(config: ImageConfig, fallback: Platform): Platform {
  if (typeof config.architecture !== "string" || typeof config.os !== "string") return fallback;
  return { os: config.os, architecture: config.architecture };
}
