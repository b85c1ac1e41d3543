/**
 * Where an image is unpacked before mkfs reads it. Unpacking is bound by file-creation latency on a
 * journaled disk (each new inode is a journal update; with other writers on the node each can wait
 * for a commit), so when the image fits, the tree is staged in memory (a tmpfs) and only the finished
 * ext4 file is written to disk. Images that may not fit, or that turn out not to fit, are staged on
 * disk in the cache's build directory instead.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readdir, rm, statfs } from "node:fs/promises";
import { totalmem } from "node:os";
import { join } from "node:path";
import { processState } from "../../../shared/index.ts";

export interface StagingOptions {
  /** A directory on a tmpfs, writable by root only below our own 0700 subdirectories (e.g. /dev/shm). */
  readonly dir: string;
  /** Largest tree staged there; bigger images are staged on disk. */
  readonly maxBytes: number;
}

/** `/dev/shm` with a budget of a quarter of RAM, at most 8 GiB. */
export function defaultStaging(): StagingOptions {
  return { dir: "/dev/shm", maxBytes: Math.min(8 * 1024 ** 3, Math.floor(totalmem() / 4)) };
}

/** Compressed-to-unpacked factor used to guess whether an image fits before unpacking it. */
const EXPANSION_GUESS = 4;
const PREFIX = "imp-staging-";

/**
 * The budget for staging an image whose compressed layers total `compressedBytes` (undefined when a
 * size is unknown), or undefined when it should go to disk: too big, or not enough free space now.
 */
export async function stagingBudget(staging: StagingOptions | undefined, compressedBytes: number | undefined): Promise<number | undefined> {
  if (staging === undefined || compressedBytes === undefined) return undefined;
  const free = await statfs(staging.dir).then((s) => s.bavail * s.bsize, () => 0);
  const budget = Math.min(staging.maxBytes, free - 256 * 1024 ** 2);
  return compressedBytes * EXPANSION_GUESS <= budget ? budget : undefined;
}

/** Makes a private (0700) staging directory for this process. */
export async function makeStagingDir(staging: StagingOptions): Promise<string> {
  const dir = join(staging.dir, `${PREFIX}${process.pid}-${randomBytes(4).toString("hex")}`);
  await mkdir(dir, { mode: 0o700 });
  return dir;
}

/** Removes staging directories of processes that are gone (a crash mid-build leaves one). */
export async function sweepStaging(staging: StagingOptions): Promise<void> {
  const names = await readdir(staging.dir).catch(() => []);
  for (const name of names) {
    if (!name.startsWith(PREFIX)) continue;
    const pid = Number(name.slice(PREFIX.length).split("-")[0]);
    if (pid === process.pid || processState(pid) !== "gone") continue;
    await rm(join(staging.dir, name), { recursive: true, force: true });
  }
}

