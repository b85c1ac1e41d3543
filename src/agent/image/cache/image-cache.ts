/**
 * The node's cache of built base images, one directory per cache key:
 *
 *   <root>/images/<key>/rootfs.ext4   the image (0444; VMs attach it read-only)
 *   <root>/images/<key>/meta.json     what it was built from
 *   <root>/images/<key>/used          its mtime is the last use (for LRU eviction)
 *   <root>/building/<key>.<pid>.<rand>/  a build in progress; never read
 *   <root>/locks/<key>.lock           flock(1) target serialising builds of one key across processes
 *
 * Guarantees:
 * - A key is built once at a time: in-process callers share one promise (single-flight), other
 *   processes wait on the key's flock and then find the image.
 * - A failed or interrupted build is never visible: the image appears only by renaming a complete
 *   build directory into `images/` (atomic on one filesystem); leftovers of dead builders are removed
 *   by `open()`.
 * - References are hard links: a VM's disk directory links `rootfs.ext4` (see disks/), so the link
 *   count says whether any VM uses an image, survives agent restarts, and is released by whatever
 *   removes the VM's directory. Eviction only considers images with a link count of 1, and even a
 *   race with a new link is harmless: evicting removes the cache's name, never the linked inode.
 * - A caller gets time to link what `ensure()`/`lookup()` returned: images used within the grace
 *   period (`graceMs`, default 10 min, by the `used` mtime) are never evicted, so a gc after another
 *   build cannot remove an image between a caller's lookup and its VM's hard link.
 */
import { randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, open, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ImpError, processState, silentLogger, systemClock, terminalError, type Clock, type Logger } from "../../../shared/index.ts";
import { acquireFileLock } from "./file-lock.ts";

export const IMAGE_FILE = "rootfs.ext4";

export interface ImageCacheOptions {
  readonly root: string;
  /** Eviction starts when the images' allocated bytes exceed this. */
  readonly maxBytes: number;
  /** How long to wait for another process building the same key. Default 30 min. */
  readonly lockTimeoutMs?: number;
  readonly logger?: Logger;
  /**
   * Images used this recently (by their `used` mtime) are never evicted: the time a caller of
   * `ensure()`/`lookup()` has to hard-link the image. Default 10 min; 0 turns the protection off.
   */
  readonly graceMs?: number;
  /** Time source for `used` marks and the grace period (tests inject a `FakeClock`). */
  readonly clock?: Clock;
}

/** Default of `ImageCacheOptions.graceMs`. */
export const DEFAULT_EVICTION_GRACE_MS = 10 * 60 * 1000;

export interface CachedImage {
  readonly key: string;
  /** Absolute path of the read-only image file. */
  readonly path: string;
  /** Bytes allocated on disk (the file is sparse). */
  readonly sizeBytes: number;
}

export interface CacheEntry extends CachedImage {
  readonly lastUsedMs: number;
  /** True while any VM holds a hard link to the image. */
  readonly inUse: boolean;
}

/** Builds the image file at `output` (inside `workDir`, which the cache removes afterwards); returns metadata to keep. */
export type ImageProducer = (work: { readonly workDir: string; readonly output: string; readonly signal?: AbortSignal }) => Promise<Record<string, unknown>>;

export interface EnsureResult extends CachedImage {
  /** True when this call (or the in-process flight it joined) built the image. */
  readonly built: boolean;
}

export interface GcResult {
  readonly evicted: readonly string[];
  readonly freedBytes: number;
  readonly totalBytes: number;
}

const KEY = /^[0-9a-f]{64}$/;
const TOUCH_EVERY_MS = 60_000;

export class ImageCache {
  readonly root: string;
  readonly maxBytes: number;
  readonly #lockTimeoutMs: number;
  readonly #logger: Logger;
  readonly #inflight = new Map<string, Promise<EnsureResult>>();
  readonly #touched = new Map<string, number>();
  readonly #clock: Clock;
  readonly graceMs: number;
  /** How often a lookup rewrites the `used` mark: at most once a minute, and well within the grace period. */
  readonly #touchEveryMs: number;

  private constructor(options: ImageCacheOptions) {
    this.root = options.root;
    this.maxBytes = options.maxBytes;
    this.#clock = options.clock ?? systemClock;
    this.graceMs = options.graceMs ?? DEFAULT_EVICTION_GRACE_MS;
    this.#touchEveryMs = Math.min(TOUCH_EVERY_MS, this.graceMs / 2);
    this.#lockTimeoutMs = options.lockTimeoutMs ?? 30 * 60 * 1000;
    this.#logger = options.logger ?? silentLogger;
  }

  /** Opens the cache (creating its directories) and removes build leftovers of dead processes. */
  static async open(options: ImageCacheOptions): Promise<ImageCache> {
    const cache = new ImageCache(options);
    for (const dir of ["images", "building", "locks", "trash"]) await mkdir(join(cache.root, dir), { recursive: true, mode: 0o700 });
    await cache.#removeDeadBuilds();
    await cache.#emptyTrash();
    return cache;
  }

  /**
   * Removes what evictions left in `trash/` (a process that died between rename and rm). The directory
   * itself stays: other processes opening or evicting at this moment rename into it, so removing and
   * recreating it would race them. An entry another process is removing right now may vanish under us;
   * that is its owner finishing, not an error.
   */
  async #emptyTrash(): Promise<void> {
    const trash = join(this.root, "trash");
    for (const entry of await readdir(trash)) {
      await rm(join(trash, entry), { recursive: true, force: true }).catch((error: unknown) => {
        this.#logger.debug({ entry, err: String(error) }, "trash entry removed concurrently");
      });
    }
  }

  /** Where the image of `key` lives (whether or not it exists). */
  pathOf(key: string): string {
    return join(this.root, "images", checkKey(key), IMAGE_FILE);
  }

  /** The cached image of `key`, marking it used now; undefined when absent. */
  async lookup(key: string): Promise<CachedImage | undefined> {
    const path = this.pathOf(key);
    const info = await stat(path).catch(() => undefined);
    if (info === undefined) return undefined;
    // LRU needs minutes, not milliseconds: one metadata write per key per minute keeps the hot path light.
    // The mark is at most half the grace period old, so what we return is protected from eviction.
    const now = this.#clock.now();
    const last = this.#touched.get(key);
    if (last === undefined || now - last >= this.#touchEveryMs) {
      this.#touched.set(key, now);
      await utimes(join(this.root, "images", key, "used"), now / 1000, now / 1000).catch(() => undefined);
    }
    return { key, path, sizeBytes: info.blocks * 512 };
  }

  /**
   * Returns the image of `key`, building it with `produce` when absent. Concurrent calls for one key
   * (in this process or others) build once. A producer that throws leaves nothing in the cache.
   */
  ensure(key: string, produce: ImageProducer, signal?: AbortSignal): Promise<EnsureResult> {
    checkKey(key);
    const running = this.#inflight.get(key);
    if (running !== undefined) return running;
    const flight = this.#ensure(key, produce, signal).finally(() => this.#inflight.delete(key));
    this.#inflight.set(key, flight);
    return flight;
  }

  /** Every cached image with its size, last use and whether a VM uses it. */
  async list(): Promise<CacheEntry[]> {
    const entries: CacheEntry[] = [];
    for (const key of await readdir(join(this.root, "images"))) {
      if (!KEY.test(key)) continue;
      const image = await stat(this.pathOf(key)).catch(() => undefined);
      if (image === undefined) continue;
      const used = await stat(join(this.root, "images", key, "used")).catch(() => undefined);
      entries.push({ key, path: this.pathOf(key), sizeBytes: image.blocks * 512, lastUsedMs: used?.mtimeMs ?? image.mtimeMs, inUse: image.nlink > 1 });
    }
    return entries;
  }

  /**
   * Evicts least-recently-used images that no VM uses until the cache holds at most `maxBytes`
   * (or `limitBytes` when given). Never evicted: images in use, being ensured by this process, or used
   * within the grace period (the cache may stay over its limit until they age out).
   */
  async gc(limitBytes = this.maxBytes): Promise<GcResult> {
    const entries = await this.list();
    let total = entries.reduce((sum, e) => sum + e.sizeBytes, 0);
    const evicted: string[] = [];
    let freed = 0;
    const protectedSince = this.#clock.now() - this.graceMs;
    const candidates = entries
      // graceMs 0 means no protection at all: a use mark written this very millisecond (or stamped a
      // little ahead by the filesystem's clock) must not spare an image.
      .filter((e) => !e.inUse && !this.#inflight.has(e.key) && (this.graceMs === 0 || e.lastUsedMs < protectedSince))
      .sort((a, b) => a.lastUsedMs - b.lastUsedMs);
    for (const entry of candidates) {
      if (total <= limitBytes) break;
      const trash = join(this.root, "trash", `${entry.key}.${randomBytes(4).toString("hex")}`);
      try {
        await rename(join(this.root, "images", entry.key), trash);
      } catch {
        continue; // Gone already (another process evicted it).
      }
      await rm(trash, { recursive: true, force: true });
      total -= entry.sizeBytes;
      freed += entry.sizeBytes;
      evicted.push(entry.key);
      this.#logger.info({ key: entry.key, bytes: entry.sizeBytes }, "evicted base image");
    }
    return { evicted, freedBytes: freed, totalBytes: total };
  }

  async #ensure(key: string, produce: ImageProducer, signal?: AbortSignal): Promise<EnsureResult> {
    const hit = await this.lookup(key);
    if (hit !== undefined) return { ...hit, built: false };
    const lock = await acquireFileLock(join(this.root, "locks", `${key}.lock`), this.#lockTimeoutMs, signal);
    try {
      const builtMeanwhile = await this.lookup(key);
      if (builtMeanwhile !== undefined) return { ...builtMeanwhile, built: false };
      await this.#build(key, produce, signal);
    } finally {
      await lock.release();
    }
    const image = await this.lookup(key);
    if (image === undefined) throw terminalError("ImageVanished", `Cannot use base image ${key}: it was evicted right after it was built`);
    await this.gc().catch((err: unknown) => this.#logger.warn({ err }, "image cache gc failed"));
    return { ...image, built: true };
  }

  async #build(key: string, produce: ImageProducer, signal?: AbortSignal): Promise<void> {
    const workDir = join(this.root, "building", `${key}.${process.pid}.${randomBytes(4).toString("hex")}`);
    const imageDir = join(workDir, "image");
    await mkdir(imageDir, { recursive: true, mode: 0o700 });
    const started = Date.now();
    try {
      const output = join(imageDir, IMAGE_FILE);
      const meta = await produce({ workDir, output, ...(signal === undefined ? {} : { signal }) });
      signal?.throwIfAborted();
      const info = await lstat(output).catch(() => undefined);
      if (info?.isFile() !== true) throw terminalError("ImageNotProduced", `Cannot build base image ${key}: the producer did not write ${output}`);
      await chmod(output, 0o444);
      await syncFile(output);
      await writeFile(join(imageDir, "meta.json"), `${JSON.stringify({ key, builtAt: new Date().toISOString(), ...meta }, null, 2)}\n`);
      await writeFile(join(imageDir, "used"), "");
      const now = this.#clock.now() / 1000;
      await utimes(join(imageDir, "used"), now, now);
      await chmod(imageDir, 0o755);
      await rename(imageDir, join(this.root, "images", key));
      this.#logger.info({ key, ms: Date.now() - started }, "built base image");
    } catch (err) {
      this.#logger.warn({ key, err: err instanceof ImpError ? err.message : String(err) }, "base image build failed");
      throw err;
    } finally {
      await rm(workDir, { recursive: true, force: true });
    }
  }

  async #removeDeadBuilds(): Promise<void> {
    for (const name of await readdir(join(this.root, "building"))) {
      const pid = Number(name.split(".")[1]);
      if (pid === process.pid || processState(pid) !== "gone") continue;
      await rm(join(this.root, "building", name), { recursive: true, force: true });
    }
  }

  /** The metadata stored with an image (for `imp image` listings). */
  async meta(key: string): Promise<Record<string, unknown> | undefined> {
    const text = await readFile(join(this.root, "images", checkKey(key), "meta.json"), "utf8").catch(() => undefined);
    return text === undefined ? undefined : (JSON.parse(text) as Record<string, unknown>);
  }
}

function checkKey(key: string): string {
  if (!KEY.test(key)) throw terminalError("BadImageKey", `Cannot use image cache key ${JSON.stringify(key)}: it is not 64 hex digits`);
  return key;
}

async function syncFile(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

