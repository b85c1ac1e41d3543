/**
 * A pool's cache volume on a node: generations (read-only ext4 images, raw) and per-VM clones.
 *
 * A VM writes only to its own clone: a qcow2 file whose backing file is the generation it was
 * cloned from. Creating one writes a ~200 KiB header whatever the generation's size (measured in
 * `bench:cache-clone`: 1 and 10 GiB alike), and QEMU opens the backing file read-only, so two VMs on
 * one generation never see each other's writes and the generation never changes under them.
 * Promotion copies a clone's view (generation plus its writes) into a new generation file, written
 * aside and renamed into place: a crash leaves the old generation or the new one, never a mix.
 *
 * Why qcow2 and not the alternatives (docs/caches.md): the node filesystem here is ext4 (no reflink;
 * reflink would also copy-on-write per file, fine on XFS/btrfs), and this kernel has no
 * device-mapper, so a dm-thin pool — what Firecracker needs, since it takes only raw block devices —
 * cannot be made or tested here. qemu-img (Debian's qemu-utils) makes and flattens the overlays;
 * no library does qcow2 for Node, and the format is QEMU's own.
 */
import { randomBytes } from "node:crypto";
import { link, mkdir, open, readdir, rm, stat } from "node:fs/promises";
import { basename, dirname, isAbsolute, join } from "node:path";
import { terminalError, type ImpError } from "../../shared/index.ts";
import { featureArg, mke2fsEnv, runTool } from "../image/ext4/index.ts";

const BLOCK = 4096;
const MIN_BYTES = 64 * 1024 ** 2;
/** A generation or clone file's name: what the sweep keeps; anything else in the directory is debris. */
const GENERATION_NAME = /^gen-[a-z0-9-]{1,63}\.raw$/;
const TEMP_SUFFIX = ".partial";

export interface CacheToolOptions {
  readonly signal?: AbortSignal;
  /** Upper bound for one tool run (mkfs, qemu-img create or convert). Default 10 min. */
  readonly timeoutMs?: number;
}

const failed = (code: "CacheGenerationFailed" | "CacheCloneFailed" | "CachePromoteFailed", what: string, err: unknown, context: Record<string, string>): ImpError =>
  terminalError(code, `Cannot ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err, context });

/** The file name of generation `id` (lowercase letters, digits and dashes). */
export function generationFileName(id: string): string {
  const name = `gen-${id}.raw`;
  if (!GENERATION_NAME.test(name)) throw terminalError("CacheGenerationFailed", `Cannot name cache generation "${id}": an id is 1–63 lowercase letters, digits or dashes`);
  return name;
}

/** Creates `dir/gen-<id>.raw`, an empty ext4 of `sizeBytes` (sparse: it holds only mkfs's metadata). */
export async function createEmptyGeneration(dir: string, id: string, sizeBytes: number, options: CacheToolOptions = {}): Promise<string> {
  if (!Number.isInteger(sizeBytes) || sizeBytes < MIN_BYTES || sizeBytes % BLOCK !== 0) {
    throw terminalError("CacheGenerationFailed", `Cannot make a cache generation of ${sizeBytes} bytes: it must be a multiple of 4096 and at least 64 MiB`);
  }
  const path = join(dir, generationFileName(id));
  const temp = `${path}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  try {
    const handle = await open(temp, "wx", 0o600);
    await handle.truncate(sizeBytes);
    await handle.close();
    await runTool("mkfs.ext4", ["-q", "-F", "-t", "ext4", "-b", String(BLOCK), "-m", "0", "-O", featureArg(true), "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "imp-cache", temp], { timeoutMs: options.timeoutMs ?? 600_000, env: await mke2fsEnv(dir), ...signalOf(options) });
    await publish(temp, path);
    return path;
  } catch (err) {
    throw failed("CacheGenerationFailed", `make cache generation ${path}`, err, { path });
  } finally {
    await rm(temp, { force: true });
  }
}

/**
 * Creates `clonePath` (which must not exist) as a copy-on-write clone of the generation at
 * `generationPath`: O(1) in the generation's size. The clone names its backing file by absolute path,
 * so the generation must stay where it is while the clone lives.
 */
export async function cloneGeneration(generationPath: string, clonePath: string, options: CacheToolOptions = {}): Promise<void> {
  const context = { generation: generationPath, clone: clonePath };
  if (!isAbsolute(generationPath)) throw terminalError("CacheCloneFailed", `Cannot clone cache generation "${generationPath}": its path must be absolute (the clone records it)`, { context });
  const generation = await stat(generationPath).catch(() => undefined);
  if (generation?.isFile() !== true) throw terminalError("CacheCloneFailed", `Cannot clone cache generation ${generationPath}: it does not exist`, { context });
  // Created beside the clone and renamed over nothing: qemu-img create would truncate an existing file.
  const temp = `${clonePath}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
  try {
    await runTool("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "raw", "-b", generationPath, "-o", "cluster_size=65536", temp, String(generation.size)], { timeoutMs: options.timeoutMs ?? 60_000, ...signalOf(options) });
    await publish(temp, clonePath);
  } catch (err) {
    throw failed("CacheCloneFailed", `clone cache generation ${generationPath} into ${clonePath}`, err, context);
  } finally {
    await rm(temp, { force: true });
  }
}

/**
 * Writes what `clonePath` holds (its generation plus the VM's writes) as the new generation
 * `dir/gen-<id>.raw`, sparse, synced, then renamed into place. The clone and its generation are
 * left as they were. Runs off any job's path: it costs a read of the clone's data.
 */
export async function promoteClone(clonePath: string, dir: string, id: string, options: CacheToolOptions = {}): Promise<string> {
  const path = join(dir, generationFileName(id));
  const temp = `${path}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
  try {
    if ((await stat(path).catch(() => undefined)) !== undefined) throw new Error(`${path} already exists`);
    // -S 4k keeps zero runs sparse, so a promoted generation costs the disk its data, not its size.
    await runTool("qemu-img", ["convert", "-q", "-f", "qcow2", "-O", "raw", "-S", "4k", clonePath, temp], { timeoutMs: options.timeoutMs ?? 600_000, ...signalOf(options) });
    await publish(temp, path);
    return path;
  } catch (err) {
    throw failed("CachePromoteFailed", `promote cache clone ${clonePath} to generation ${id}`, err, { clone: clonePath, generation: path });
  } finally {
    await rm(temp, { force: true });
  }
}

/** Removes what a crash left in `dir` (partial generations and clones); returns the names removed. */
export async function sweepPartials(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const partial = names.filter((n) => n.endsWith(TEMP_SUFFIX));
  await Promise.all(partial.map((n) => rm(join(dir, n), { force: true })));
  return partial;
}

/**
 * fsyncs `temp`, links it as `path` and fsyncs the directory. link(2), unlike rename(2), fails if
 * `path` exists, so two promotions to one id cannot replace each other; the caller removes `temp`.
 */
async function publish(temp: string, path: string): Promise<void> {
  const file = await open(temp, "r+");
  try {
    await file.sync();
  } finally {
    await file.close();
  }
  await link(temp, path).catch((err: NodeJS.ErrnoException) => {
    throw err.code === "EEXIST" ? new Error(`${basename(path)} already exists in ${dirname(path)}`) : err;
  });
  const parent = await open(dirname(path), "r");
  try {
    await parent.sync();
  } finally {
    await parent.close();
  }
}

const signalOf = (options: CacheToolOptions): { signal?: AbortSignal } => (options.signal === undefined ? {} : { signal: options.signal });
