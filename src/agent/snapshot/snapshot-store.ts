/**
 * The node's memory snapshots of template VMs, one directory per key under `root`: the template's
 * RAM file, its device state and its scratch disk as they were saved, and a `meta.json` with their
 * sizes and digests. Built in a `.building-*` directory and renamed into place, so a crash leaves a
 * whole snapshot or none; one build per key at a time. `find` verifies before it hands a snapshot
 * out — sizes and the state's digest on every call, the RAM file's and disk's digests once per file
 * identity (a restore maps them; hashing 512 MiB per job would cost what the restore saves) — and
 * deletes one that fails, saying why, so the caller boots instead. Evicted least recently used
 * beyond `maxBytes`; a snapshot a VM is restoring from is never deleted under it (the VM holds its
 * own hard links, see `linkInto`).
 */
import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { link, mkdir, readdir, readFile, rename, rm, stat, statfs, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describeError, retryableError, terminalError, type Clock, type Logger } from "../../shared/index.ts";

const META = "meta.json";
const META_VERSION = 1;
const KEY = /^[0-9a-f]{64}$/;

/** The files of one snapshot. */
export interface SnapshotFiles {
  readonly memoryFile: string;
  readonly statePath: string;
  readonly scratch: string;
}

export interface SnapshotMeta {
  readonly version: typeof META_VERSION;
  readonly key: string;
  readonly createdAt: string;
  readonly memoryBytes: number;
  readonly memorySha256: string;
  readonly stateBytes: number;
  readonly stateSha256: string;
  readonly scratchBytes: number;
  readonly scratchSha256: string;
  /** How long the template took to boot to a ready guest agent and to save, for the record. */
  readonly bootMs: number;
  readonly saveMs: number;
}

export interface TemplateSnapshot extends SnapshotFiles {
  readonly key: string;
  readonly dir: string;
  readonly meta: SnapshotMeta;
  /** The verified files' identity (device, inode, size, mtime of each): `linkInto` checks the links against it. */
  readonly identity: string;
}

export type FindResult =
  | { readonly found: TemplateSnapshot; readonly discarded?: undefined }
  | { readonly found?: undefined; readonly discarded?: string };

export interface SnapshotStoreOptions {
  readonly root: string;
  /** Bytes on disk all snapshots may take; the least recently used beyond it are deleted. */
  readonly maxBytes: number;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** What a build may take on disk at most (its RAM file holds up to the guest's memory): checked against free space first. */
export interface SnapshotRoom {
  readonly maxBytes: number;
}

/**
 * Free space a template build always leaves on the state directory's filesystem: a tenth of it, at
 * least 256 MiB (the headroom kubelet's image GC keeps by default, 15 %, is of the same order).
 */
export function snapshotDiskReserveBytes(filesystemBytes: number): number {
  return Math.max(256 * 1024 * 1024, Math.floor(filesystemBytes / 10));
}

const mib = (bytes: number): number => Math.floor(bytes / (1024 * 1024));

/** Free space below which a failed build is taken for one the disk stopped. */
const NEARLY_FULL_BYTES = 64 * 1024 * 1024;

/** Whether `err` or one of its causes says the disk was full. */
function isNoSpace(err: unknown): boolean {
  let current: unknown = err;
  for (let depth = 0; current instanceof Error && depth < 5; depth++) {
    if ((current as NodeJS.ErrnoException).code === "ENOSPC" || /No space left on device|os error 28\b/.test(current.message)) return true;
    current = current.cause;
  }
  return false;
}

/** What a build must leave in `files`, and how long its parts took. */
export type SnapshotBuilder = (files: SnapshotFiles, signal: AbortSignal) => Promise<{ readonly bootMs: number; readonly saveMs: number }>;

export class SnapshotStore {
  readonly #o: SnapshotStoreOptions;
  readonly #building = new Map<string, Promise<TemplateSnapshot>>();
  /** Per key, the file identities whose full digests were checked in this process. */
  readonly #verified = new Map<string, string>();
  /** Per key, the tail of its operations: find, publish and remove of one key never interleave. */
  readonly #locks = new Map<string, Promise<unknown>>();

  /** Throws a terminal `SnapshotKeyInvalid` for a root QEMU 7.2 could not be handed (see memory-snapshot.ts). */
  constructor(options: SnapshotStoreOptions) {
    if (!/^\/[A-Za-z0-9._/-]+$/.test(options.root)) {
      throw terminalError("SnapshotKeyInvalid", `Cannot keep memory snapshots in ${JSON.stringify(options.root)}: QEMU 7.2 reads a snapshot through /bin/sh, so the path may hold only A-Z a-z 0-9 . _ / -`);
    }
    this.#o = options;
  }

  #locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.#locks.get(key) ?? Promise.resolve()).then(fn, fn);
    const tail = run.catch(() => undefined);
    this.#locks.set(key, tail);
    void tail.then(() => {
      if (this.#locks.get(key) === tail) this.#locks.delete(key);
    });
    return run;
  }

  static filesIn(dir: string): SnapshotFiles {
    return { memoryFile: join(dir, "memory"), statePath: join(dir, "state"), scratch: join(dir, "scratch.ext4") };
  }

  /** The verified snapshot for `key`, or why there is none usable (a snapshot that failed is deleted). */
  async find(key: string): Promise<FindResult> {
    checkKey(key);
    return this.#locked(key, () => this.#find(key));
  }

  async #find(key: string): Promise<FindResult> {
    const dir = join(this.#o.root, key);
    let meta: SnapshotMeta;
    try {
      meta = JSON.parse(await readFile(join(dir, META), "utf8")) as SnapshotMeta;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
      return this.#discard(key, `its ${META} is unreadable (${(err as Error).message})`);
    }
    const files = { key, dir, meta, ...SnapshotStore.filesIn(dir) };
    const problem = await this.#verify(files);
    if (problem !== undefined) return this.#discard(key, problem);
    const now = new Date(this.#o.clock.now());
    await utimes(dir, now, now).catch(() => undefined);
    return { found: { ...files, identity: await identity(files) } };
  }

  /**
   * Builds the snapshot for `key` once (concurrent callers share the build) and publishes it whole.
   * A failed build leaves nothing behind and rejects with the builder's error.
   */
  create(key: string, build: SnapshotBuilder, signal: AbortSignal, room: SnapshotRoom = { maxBytes: 0 }): Promise<TemplateSnapshot> {
    checkKey(key);
    const running = this.#building.get(key);
    if (running !== undefined) return running;
    // A snapshot published since the caller's miss is kept, not rebuilt and replaced. The build runs
    // outside the key's lock (lookups meanwhile miss at once); only its publishing takes the lock.
    const promise = (async () => (await this.#locked(key, () => this.#find(key))).found ?? this.#create(key, build, signal, room))().finally(() => this.#building.delete(key));
    this.#building.set(key, promise);
    return promise;
  }

  /**
   * Hard links of the snapshot's three files into `dir` (same filesystem: the node's state
   * directory), so a VM restoring from them keeps them whatever eviction or a rebuild does
   * meanwhile. Rejects with a retryable `SnapshotUnreadable` when the files linked are not the ones
   * `find` verified (a rebuild was published in between): the caller boots instead.
   */
  async linkInto(snapshot: TemplateSnapshot, dir: string): Promise<SnapshotFiles> {
    const files: SnapshotFiles = { memoryFile: join(dir, "snapshot-memory"), statePath: join(dir, "snapshot-state"), scratch: join(dir, "snapshot-scratch") };
    for (const [from, to] of [[snapshot.memoryFile, files.memoryFile], [snapshot.statePath, files.statePath], [snapshot.scratch, files.scratch]] as const) {
      await rm(to, { force: true });
      await link(from, to);
    }
    if ((await identity(files)) !== snapshot.identity) {
      throw retryableError("SnapshotUnreadable", `Cannot restore from memory snapshot ${snapshot.key}: it was replaced while being linked`);
    }
    return files;
  }

  /** Removes the snapshot of `key`; with `only`, only if it is still that version (not a rebuild published since). */
  async remove(key: string, only?: TemplateSnapshot): Promise<void> {
    checkKey(key);
    return this.#locked(key, async () => {
      const dir = join(this.#o.root, key);
      if (only !== undefined && (await identity(SnapshotStore.filesIn(dir)).catch(() => "")) !== only.identity) return;
      this.#verified.delete(key);
      await rm(dir, { recursive: true, force: true });
    });
  }

  /**
   * Deletes what a crash left (`.building-*`), entries that are not snapshots, and the least recently
   * used snapshots beyond `maxBytes`. Returns the keys it evicted.
   */
  async sweep(): Promise<{ readonly evicted: readonly string[]; readonly usedBytes: number }> {
    const entries: { key: string; bytes: number; usedMs: number }[] = [];
    // A missing root is nothing to sweep, and stays missing: a decommissioned node's state directory
    // was emptied on purpose, and a sweep must not put a directory back into it.
    const found = await readdir(this.#o.root, { withFileTypes: true }).catch((err: unknown) => ((err as NodeJS.ErrnoException).code === "ENOENT" ? [] : Promise.reject(err)));
    for (const entry of found) {
      const path = join(this.#o.root, entry.name);
      if (entry.name.startsWith(".building-")) {
        const key = entry.name.slice(".building-".length).split(".")[0] ?? "";
        if (!this.#building.has(key)) await rm(path, { recursive: true, force: true });
        continue;
      }
      if (!entry.isDirectory() || !KEY.test(entry.name)) {
        await rm(path, { recursive: true, force: true });
        continue;
      }
      entries.push({ key: entry.name, bytes: await allocatedBytes(path), usedMs: (await stat(path)).mtimeMs });
    }
    entries.sort((a, b) => b.usedMs - a.usedMs);
    let used = 0;
    const evicted: string[] = [];
    for (const e of entries) {
      if (used + e.bytes <= this.#o.maxBytes) {
        used += e.bytes;
        continue;
      }
      await this.remove(e.key);
      evicted.push(e.key);
      this.#o.logger.info({ key: e.key, bytes: e.bytes, maxBytes: this.#o.maxBytes }, "memory snapshot evicted");
    }
    return { evicted, usedBytes: used };
  }

  async #create(key: string, build: SnapshotBuilder, signal: AbortSignal, room: SnapshotRoom): Promise<TemplateSnapshot> {
    await mkdir(this.#o.root, { recursive: true });
    // A build is not started on a filesystem it could fill: the job VMs beside it need that disk
    // (their scratch copies, their image layers) more than a template does.
    const fs = await statfs(this.#o.root);
    const freeBytes = fs.bavail * fs.bsize;
    const reserve = snapshotDiskReserveBytes(fs.blocks * fs.bsize);
    if (freeBytes < room.maxBytes + reserve) {
      throw retryableError("SnapshotNoSpace", `Cannot build the memory snapshot ${key}: ${mib(freeBytes)} MiB free in ${this.#o.root}, and a snapshot may take ${mib(room.maxBytes)} MiB with ${mib(reserve)} MiB left for the node's VMs; VMs of its class boot until there is room`, { context: { key, freeBytes, needBytes: room.maxBytes + reserve } });
    }
    const work = join(this.#o.root, `.building-${key}.${randomBytes(4).toString("hex")}`);
    await mkdir(work, { mode: 0o700 });
    try {
      const files = SnapshotStore.filesIn(work);
      const { bootMs, saveMs } = await build(files, signal);
      signal.throwIfAborted();
      const [memory, state, scratch] = await Promise.all([describe(files.memoryFile), describe(files.statePath), describe(files.scratch)]);
      const meta: SnapshotMeta = {
        version: META_VERSION,
        key,
        createdAt: new Date(this.#o.clock.now()).toISOString(),
        memoryBytes: memory.bytes,
        memorySha256: memory.sha256,
        stateBytes: state.bytes,
        stateSha256: state.sha256,
        scratchBytes: scratch.bytes,
        scratchSha256: scratch.sha256,
        bootMs: Math.round(bootMs),
        saveMs: Math.round(saveMs),
      };
      await writeFile(join(work, META), JSON.stringify(meta), { mode: 0o600 });
      const dir = join(this.#o.root, key);
      const snapshot = await this.#locked(key, async (): Promise<TemplateSnapshot> => {
        await rm(dir, { recursive: true, force: true });
        await rename(work, dir);
        const published = { key, dir, meta, ...SnapshotStore.filesIn(dir) };
        const id = await identity(published);
        this.#verified.set(key, id);
        return { ...published, identity: id };
      });
      this.#o.logger.info({ key, memoryBytes: meta.memoryBytes, stateBytes: meta.stateBytes, bootMs: meta.bootMs, saveMs: meta.saveMs }, "memory snapshot created");
      return snapshot;
    } catch (err) {
      // The disk filled while the build wrote (another writer took the room the check saw). The VMM
      // reports that in its own words (Firecracker: "os error 28"; QEMU's file-backed RAM: a SIGBUS
      // exit), so besides the error's own words, a filesystem found (nearly) full says it too.
      const full = isNoSpace(err) || (await statfs(this.#o.root).then((f) => f.bavail * f.bsize < Math.min(reserve, NEARLY_FULL_BYTES), () => false));
      await rm(work, { recursive: true, force: true });
      if (full) throw retryableError("SnapshotNoSpace", `Cannot build the memory snapshot ${key}: ${this.#o.root} ran out of space while it was written (${describeError(err)}); nothing of it was kept`, { cause: err, context: { key } });
      throw err;
    }
  }

  async #verify(s: Omit<TemplateSnapshot, "identity">): Promise<string | undefined> {
    const m = s.meta;
    if (m.version !== META_VERSION || m.key !== s.key) return `its ${META} is of another version or key`;
    const sizes: [string, string, number][] = [["RAM file", s.memoryFile, m.memoryBytes], ["device state", s.statePath, m.stateBytes], ["scratch disk", s.scratch, m.scratchBytes]];
    for (const [what, path, bytes] of sizes) {
      const st = await stat(path).catch(() => undefined);
      if (st === undefined) return `its ${what} is missing`;
      // Not a FIFO or a device that reading would block on or never end.
      if (!st.isFile()) return `its ${what} is not a regular file`;
      if (st.size !== bytes) return `its ${what} is ${st.size} bytes, not the ${bytes} it was saved with`;
    }
    // The state is small and read whole by every restore: checked every time.
    if ((await describe(s.statePath)).sha256 !== m.stateSha256) return "its device state does not match its digest";
    const id = await identity(s);
    if (this.#verified.get(s.key) === id) return undefined;
    if ((await describe(s.memoryFile)).sha256 !== m.memorySha256) return "its RAM file does not match its digest";
    if ((await describe(s.scratch)).sha256 !== m.scratchSha256) return "its scratch disk does not match its digest";
    this.#verified.set(s.key, id);
    return undefined;
  }

  /** Called under the key's lock. */
  async #discard(key: string, why: string): Promise<FindResult> {
    this.#o.logger.warn({ key, why }, "memory snapshot discarded");
    this.#verified.delete(key);
    await rm(join(this.#o.root, key), { recursive: true, force: true });
    return { discarded: why };
  }
}

function checkKey(key: string): void {
  if (!KEY.test(key)) throw terminalError("SnapshotKeyInvalid", `Cannot use memory snapshot key ${JSON.stringify(key)}: not 64 hex digits`);
}

/**
 * Device, inode, size and modification time of the three files: a file replaced or rewritten changes
 * it (not the change time: every hard link a restoring VM takes changes that).
 */
async function identity(s: SnapshotFiles): Promise<string> {
  const parts = await Promise.all([s.memoryFile, s.statePath, s.scratch].map(async (p) => {
    const st = await stat(p);
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
  }));
  return parts.join("|");
}

async function describe(path: string): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash("sha256");
  let bytes = 0;
  try {
    for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
      hash.update(chunk as Buffer);
      bytes += (chunk as Buffer).length;
    }
  } catch (err) {
    throw retryableError("SnapshotUnreadable", `Cannot read memory snapshot file ${path}: ${(err as Error).message}`, { cause: err });
  }
  return { bytes, sha256: hash.digest("hex") };
}

async function allocatedBytes(dir: string): Promise<number> {
  let total = 0;
  for (const name of await readdir(dir)) {
    const st = await stat(join(dir, name)).catch(() => undefined);
    if (st !== undefined) total += st.blocks * 512;
  }
  return total;
}
