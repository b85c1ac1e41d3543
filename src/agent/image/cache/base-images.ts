/**
 * Base images on demand: layers + guest agent → cache key → cached ext4 image, built once per key.
 * This is the entry the agent's VM preparation calls; `imp image build` calls it too.
 */
import { mkdir, rm, statfs } from "node:fs/promises";
import { join } from "node:path";
import { describeError, ImpError, silentLogger, type Logger } from "../../../shared/index.ts";
import { buildExt4, defaultBaseParams, mkfsIdentity, type Ext4Params } from "../ext4/index.ts";
import { defaultLayerLimits, GUEST_AGENT_INIT, stagingCapBytes, unpackRootfs, type LayerBlob, type LayerLimits } from "../layers/index.ts";
import { baseImageKey, BUILDER_FORMAT_VERSION, uuidOfKey } from "./cache-key.ts";
import type { EnsureResult, ImageCache } from "./image-cache.ts";
import { defaultStaging, makeStagingDir, stagingBudget, sweepStaging, type StagingOptions } from "./staging.ts";

export interface BaseImageRequest {
  /** In application order: the image's layers, then extra layers such as the runner layer. */
  readonly layers: readonly LayerBlob[];
  readonly guestAgent: { readonly path: string; readonly digest: string };
}

export interface BaseImagesOptions {
  readonly cache: ImageCache;
  readonly params?: Ext4Params;
  readonly limits?: LayerLimits;
  readonly logger?: Logger;
  /** Timeout of each filesystem tool run; default 30 min. */
  readonly toolTimeoutMs?: number;
  /** Memory staging for unpacking (see staging.ts); default `defaultStaging()`, `null` to always stage on disk. */
  readonly staging?: StagingOptions | null;
  /**
   * Free space left alone on the staging filesystem: an image may unpack to at most its free space at
   * the start of the build less this (half of that when staged on disk, where the ext4 file goes too).
   * Default 1 GiB.
   */
  readonly stagingReserveBytes?: number;
}

/** Phases of one build, for progress output and logs. */
export type BuildEvent =
  | { readonly kind: "layer-applied"; readonly digest: string; readonly index: number; readonly ms: number }
  | { readonly kind: "unpacked"; readonly entries: number; readonly fileBytes: number; readonly ms: number; readonly staging: "memory" | "disk" }
  | { readonly kind: "ext4-built"; readonly sizeBytes: number; readonly ms: number };

export class BaseImages {
  readonly cache: ImageCache;
  readonly params: Ext4Params;
  readonly #limits: LayerLimits;
  readonly #logger: Logger;
  readonly #toolTimeoutMs: number;
  readonly #staging: StagingOptions | undefined;
  readonly #reserveBytes: number;
  #sweptOnce: Promise<void> | undefined;

  constructor(options: BaseImagesOptions) {
    this.cache = options.cache;
    this.params = options.params ?? defaultBaseParams();
    this.#limits = options.limits ?? defaultLayerLimits();
    this.#logger = options.logger ?? silentLogger;
    this.#toolTimeoutMs = options.toolTimeoutMs ?? 30 * 60 * 1000;
    this.#staging = options.staging === null ? undefined : (options.staging ?? defaultStaging());
    this.#reserveBytes = options.stagingReserveBytes ?? 1024 ** 3;
  }

  /** Leftover staging directories of dead builders are removed once, before the first build. */
  get #swept(): Promise<void> {
    this.#sweptOnce ??= this.#staging === undefined ? Promise.resolve() : sweepStaging(this.#staging).catch(() => undefined);
    return this.#sweptOnce;
  }

  /** The cache key of a request (asks mkfs.ext4 for its version once per process). */
  async keyOf(request: BaseImageRequest): Promise<string> {
    return baseImageKey({
      layers: request.layers.map((l) => ({ digest: l.digest, mediaType: l.mediaType })),
      guestAgentDigest: request.guestAgent.digest,
      params: this.params,
      mkfs: await mkfsIdentity(),
    });
  }

  /** The cached image for `request`, built (once, however many callers) when missing. */
  async ensure(request: BaseImageRequest, options: { readonly signal?: AbortSignal; readonly onEvent?: (event: BuildEvent) => void } = {}): Promise<EnsureResult> {
    const key = await this.keyOf(request);
    const emit = options.onEvent ?? (() => undefined);
    return this.cache.ensure(key, async ({ workDir, output, signal }) => {
      await this.#swept;
      const compressed = request.layers.every((l) => l.size !== undefined) ? request.layers.reduce((sum, l) => sum + (l.size ?? 0), 0) : undefined;
      const budget = await stagingBudget(this.#staging, compressed);
      if (budget !== undefined && this.#staging !== undefined) {
        const dir = await makeStagingDir(this.#staging);
        try {
          return await this.#build(key, request, { stage: dir, workDir, output, limit: budget, emit, ...(signal === undefined ? {} : { signal }) });
        } catch (err) {
          // The image did not fit in memory after all (bigger than guessed, or the tmpfs filled up): stage on disk.
          const tooBig = err instanceof ImpError && err.code === "LayerTooLarge" && budget < this.#limits.maxUncompressedBytes;
          const full = /ENOSPC/.test(describeError(err));
          if (!tooBig && !full) throw err;
          this.#logger.info({ key, budget }, "image does not fit the memory staging area; staging on disk");
          await rm(output, { force: true });
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      }
      return this.#build(key, request, { stage: workDir, workDir, output, limit: this.#limits.maxUncompressedBytes, emit, ...(signal === undefined ? {} : { signal }) });
    }, options.signal);
  }

  async #build(
    key: string,
    request: BaseImageRequest,
    where: { readonly stage: string; readonly workDir: string; readonly output: string; readonly limit: number; readonly emit: (e: BuildEvent) => void; readonly signal?: AbortSignal },
  ): Promise<Record<string, unknown>> {
    const { emit, signal } = where;
    const target = join(where.stage, "rootfs");
    await mkdir(target, { mode: 0o755 });
    const onDisk = where.stage === where.workDir;
    const free = await statfs(where.stage).then((s) => s.bavail * s.bsize);
    const limit = Math.min(where.limit, this.#limits.maxUncompressedBytes, stagingCapBytes(free, this.#reserveBytes, onDisk));
    const started = Date.now();
    let layerStart = started;
    const rootfs = await unpackRootfs({
      target,
      layers: request.layers,
      guestAgentPath: request.guestAgent.path,
      guestAgentDigest: request.guestAgent.digest,
      limits: { ...this.#limits, maxUncompressedBytes: limit },
      ...(signal === undefined ? {} : { signal }),
      onLayer: (digest, index) => {
        emit({ kind: "layer-applied", digest, index, ms: Date.now() - layerStart });
        layerStart = Date.now();
      },
    });
    emit({ kind: "unpacked", entries: rootfs.entries, fileBytes: rootfs.fileBytes, ms: Date.now() - started, staging: onDisk ? "disk" : "memory" });
    const mkfsStart = Date.now();
    const plan = await buildExt4({ rootfs, output: where.output, params: this.params, uuid: uuidOfKey(key), workDir: where.workDir, timeoutMs: this.#toolTimeoutMs, ...(signal === undefined ? {} : { signal }) });
    emit({ kind: "ext4-built", sizeBytes: plan.sizeBytes, ms: Date.now() - mkfsStart });
    this.#logger.info({ key, entries: rootfs.entries, droppedXattrs: rootfs.droppedXattrs, devices: rootfs.specials.size }, "unpacked image");
    return {
      format: BUILDER_FORMAT_VERSION,
      layers: request.layers.map((l) => ({ digest: l.digest, mediaType: l.mediaType })),
      guestAgentDigest: request.guestAgent.digest,
      mkfs: await mkfsIdentity(),
      init: GUEST_AGENT_INIT,
      params: this.params,
      fsSizeBytes: plan.sizeBytes,
      inodes: plan.inodes,
      droppedXattrs: rootfs.droppedXattrs,
    };
  }
}
