/**
 * A pool's cache volume on a node: generations (ext4 images, raw) and per-VM clones.
 *
 * A VM writes only to its own clone: a qcow2 file whose backing file is the generation it was
 * cloned from. Creating one writes a ~200 KiB header whatever the generation's size (measured in
 * `bench:cache-clone`: 1 and 10 GiB alike), and QEMU opens the backing file read-only, so two VMs on
 * one generation never see each other's writes and the generation never changes under them.
 * Promotion copies a clone's view (generation plus its writes) into a new generation file, written
 * aside and linked into place: a crash leaves the old generation or the new one, never a mix.
 *
 * A generation's bytes are a guest's writes: it may hold anything, a qcow2 header naming a host
 * file included. So a generation is only ever opened as raw (`-f raw`, `-F raw`, and the QEMU driver
 * names the backing file and its format on the command line, never trusting a clone's header).
 *
 * Why qcow2 and not the alternatives (docs/caches.md): the node filesystem here is ext4 (no reflink;
 * reflink would also copy-on-write per file, fine on XFS/btrfs), and this kernel has no
 * device-mapper, so a dm-thin pool — what Firecracker needs, since it takes only raw block devices —
 * cannot be made or tested here. qemu-img (Debian's qemu-utils) makes and flattens the overlays;
 * no library does qcow2 for Node, and the format is QEMU's own.
 */
import { randomBytes } from "node:crypto";
import { chmod, link, mkdir, mkdtemp, open, readdir, rm, stat } from "node:fs/promises";
import { basename, dirname, isAbsolute, join } from "node:path";
import { ImpError, retryableError, terminalError } from "../../shared/index.ts";
import { featureArg, mke2fsEnv, runTool } from "../image/ext4/index.ts";

const BLOCK = 4096;
const MIN_BYTES = 64 * 1024 ** 2;
const MAX_BYTES = 1024 ** 4;
const GENERATION_NAME = /^gen-[a-z0-9-]{1,63}\.raw$/;
const TEMP_SUFFIX = ".partial";
/** Generations are never written after they are published; clones only by their VM's QEMU. */
const GENERATION_MODE = 0o400;
const CLONE_MODE = 0o600;

type CacheCode = "CacheGenerationFailed" | "CacheCloneFailed" | "CachePromoteFailed";

export interface CacheToolOptions {
  readonly signal?: AbortSignal;
  /** Upper bound for one tool run (mkfs, qemu-img create or convert). Default 10 min. */
  readonly timeoutMs?: number;
}

/**
 * A failed step as this part's error: the caller's abort as its own reason; a refusal of ours
 * (ImpError from a check) as it is; anything else — a tool's failure, a full disk — retryable,
 * since the same call can succeed once the node has room or the tool's cause is gone.
 */
function failed(code: CacheCode, what: string, err: unknown, signal: AbortSignal | undefined, context: Record<string, string>): unknown {
  if (signal?.aborted === true) return signal.reason;
  if (err instanceof ImpError && err.errorClass === "terminal" && err.code === code) return err;
  return retryableError(code, `Cannot ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err, context });
}

const refuse = (code: CacheCode, message: string, context: Record<string, string> = {}): ImpError => terminalError(code, message, { context });

/** The file name of generation `id` (lowercase letters, digits and dashes). */
export function generationFileName(id: string): string {
  const name = `gen-${id}.raw`;
  if (!GENERATION_NAME.test(name)) throw refuse("CacheGenerationFailed", `Cannot name cache generation "${id}": an id is 1–63 lowercase letters, digits or dashes`);
  return name;
}

function absolute(code: CacheCode, what: string, path: string): void {
  if (!isAbsolute(path)) throw refuse(code, `Cannot use ${what} "${path}": it must be an absolute path`, { path });
}

/** Creates `dir/gen-<id>.raw`, an empty ext4 of `sizeBytes` (sparse: it holds only mkfs's metadata). */
export async function createEmptyGeneration(dir: string, id: string, sizeBytes: number, options: CacheToolOptions = {}): Promise<string> {
  absolute("CacheGenerationFailed", "cache directory", dir);
  if (!Number.isInteger(sizeBytes) || sizeBytes < MIN_BYTES || sizeBytes > MAX_BYTES || sizeBytes % BLOCK !== 0) {
    throw refuse("CacheGenerationFailed", `Cannot make a cache generation of ${sizeBytes} bytes: it must be a multiple of 4096 from 64 MiB to 1 TiB`);
  }
  const path = join(dir, generationFileName(id));
  const temp = `${path}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
  let config: string | undefined;
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const handle = await open(temp, "wx", CLONE_MODE);
    try {
      await handle.truncate(sizeBytes);
    } finally {
      await handle.close();
    }
    // mke2fs's pinned config in a directory of this call's own, not beside other calls' files.
    config = await mkdtemp(join(dir, ".mke2fs-"));
    await runTool("mkfs.ext4", ["-q", "-F", "-t", "ext4", "-b", String(BLOCK), "-m", "0", "-O", featureArg(true), "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "imp-cache", temp], { timeoutMs: options.timeoutMs ?? 600_000, env: await mke2fsEnv(config), ...signalOf(options) });
    await publish(temp, path, GENERATION_MODE, "CacheGenerationFailed");
    return path;
  } catch (err) {
    throw failed("CacheGenerationFailed", `make cache generation ${path}`, err, options.signal, { path });
  } finally {
    await rm(temp, { force: true });
    if (config !== undefined) await rm(config, { recursive: true, force: true });
  }
}

/**
 * Creates `clonePath` (which must not exist) as a copy-on-write clone of the generation at
 * `generationPath`: O(1) in the generation's size. The clone names its backing file by absolute path,
 * so the generation must stay where it is while the clone lives.
 */
export async function cloneGeneration(generationPath: string, clonePath: string, options: CacheToolOptions = {}): Promise<void> {
  const context = { generation: generationPath, clone: clonePath };
  absolute("CacheCloneFailed", "cache generation", generationPath);
  absolute("CacheCloneFailed", "cache clone", clonePath);
  // Created beside the clone and linked over nothing: qemu-img create would truncate an existing file.
  const temp = `${clonePath}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
  try {
    const generation = await stat(generationPath).catch((err: NodeJS.ErrnoException) => {
      throw err.code === "ENOENT" ? refuse("CacheCloneFailed", `Cannot clone cache generation ${generationPath}: it does not exist`, context) : err;
    });
    if (!generation.isFile()) throw refuse("CacheCloneFailed", `Cannot clone cache generation ${generationPath}: it is not a file`, context);
    await runTool("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "raw", "-b", generationPath, "-o", "cluster_size=65536", temp, String(generation.size)], { timeoutMs: options.timeoutMs ?? 60_000, ...signalOf(options) });
    await publish(temp, clonePath, CLONE_MODE, "CacheCloneFailed");
  } catch (err) {
    throw failed("CacheCloneFailed", `clone cache generation ${generationPath} into ${clonePath}`, err, options.signal, context);
  } finally {
    await rm(temp, { force: true });
  }
}

/**
 * Writes what `clonePath` holds (its generation `backingPath` plus the VM's writes) as the new
 * generation `dir/gen-<id>.raw`, sparse, synced, then linked into place; refused if that
 * generation exists. The clone and its generation are left as they were. Runs off any job's path:
 * it costs a read of the clone's data.
 *
 * The backing file and its format are named here, as the QEMU driver names them: the clone's
 * header was last written by a VM's QEMU, and what it names is not what promotion reads.
 */
export async function promoteClone(clonePath: string, backingPath: string, dir: string, id: string, options: CacheToolOptions = {}): Promise<string> {
  const context = { clone: clonePath, backing: backingPath, dir, id };
  let temp: string | undefined;
  try {
    absolute("CachePromoteFailed", "cache clone", clonePath);
    absolute("CachePromoteFailed", "cache generation", backingPath);
    absolute("CachePromoteFailed", "cache directory", dir);
    const path = join(dir, generationFileName(id));
    if ((await stat(path).catch(() => undefined)) !== undefined) throw refuse("CachePromoteFailed", `Cannot promote cache clone ${clonePath}: generation ${path} already exists`, context);
    temp = `${path}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
    // -S 4k keeps zero runs sparse, so a promoted generation costs the disk its data, not its size.
    const source = `driver=qcow2,file.filename=${optionValue(clonePath)},backing.driver=raw,backing.file.filename=${optionValue(backingPath)}`;
    await runTool("qemu-img", ["convert", "-q", "--image-opts", source, "-O", "raw", "-S", "4k", temp], { timeoutMs: options.timeoutMs ?? 600_000, ...signalOf(options) });
    await publish(temp, path, GENERATION_MODE, "CachePromoteFailed");
    return path;
  } catch (err) {
    throw failed("CachePromoteFailed", `promote cache clone ${clonePath} to generation ${id}`, err, options.signal, context);
  } finally {
    if (temp !== undefined) await rm(temp, { force: true });
  }
}

/**
 * Removes what a crash left in `dir` (partial generations and clones); returns the names removed.
 * Only for an agent's start, before any clone or promotion of this directory runs: it would remove
 * the files of one in flight.
 */
export async function sweepPartials(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const partial = names.filter((n) => n.endsWith(TEMP_SUFFIX) || n.startsWith(".mke2fs-"));
  await Promise.all(partial.map((n) => rm(join(dir, n), { recursive: true, force: true })));
  return partial;
}

/**
 * Gives `temp` its final mode, fsyncs it, links it as `path` and fsyncs the directory. link(2),
 * unlike rename(2), fails if `path` exists, so two promotions to one id cannot replace each other;
 * the caller removes `temp`.
 */
async function publish(temp: string, path: string, mode: number, code: CacheCode): Promise<void> {
  await chmod(temp, mode);
  const file = await open(temp, "r");
  try {
    await file.sync();
  } finally {
    await file.close();
  }
  await link(temp, path).catch((err: NodeJS.ErrnoException) => {
    throw err.code === "EEXIST" ? refuse(code, `Cannot publish ${basename(path)} in ${dirname(path)}: it already exists`, { path }) : err;
  });
  const parent = await open(dirname(path), "r");
  try {
    await parent.sync();
  } finally {
    await parent.close();
  }
}

/** A value inside QEMU's comma-separated options: a comma is written twice. */
const optionValue = (value: string): string => value.replaceAll(",", ",,");

const signalOf = (options: CacheToolOptions): { signal?: AbortSignal } => (options.signal === undefined ? {} : { signal: options.signal });
