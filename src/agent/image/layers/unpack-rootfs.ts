/**
 * Unpacks an image's layers, in order, into a fresh directory and injects the guest agent at
 * `/.imp/imp-guest`. The result is a directory plus the records (device nodes, xattrs) that only
 * the ext4 step can materialise, and totals for sizing the filesystem.
 */
import { constants } from "node:fs";
import { chmod, chown, copyFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import { applyLayer, type LayerBlob } from "./apply-layer.ts";
import { ConfinedTree, type SpecialNode, type Xattrs } from "./confined-tree.ts";
import { LayerBudget, type LayerLimits } from "./limits.ts";
import { verifyFile } from "./verify-digest.ts";

/** Where the guest agent lives inside every image; the kernel boots it with `init=/.imp/imp-guest`. */
export const GUEST_AGENT_DIR = ".imp";
export const GUEST_AGENT_NAME = "imp-guest";
export const GUEST_AGENT_INIT = `/${GUEST_AGENT_DIR}/${GUEST_AGENT_NAME}`;

export interface UnpackOptions {
  /** An empty directory to unpack into; the caller owns it and removes it on failure. */
  readonly target: string;
  /** In application order: the image's layers, then extra layers (e.g. the runner layer). */
  readonly layers: readonly LayerBlob[];
  /** Host path of the guest agent binary to copy to `/.imp/imp-guest`. */
  readonly guestAgentPath: string;
  /**
   * `sha256:<hex>` the guest agent must have (the one in the cache key). The copy inside the tree is
   * hashed and must match, else `DigestMismatch`: a binary replaced after its digest was taken is never
   * cached under the old key. Omitted only by tests of layer application.
   */
  readonly guestAgentDigest?: string;
  readonly limits: LayerLimits;
  readonly signal?: AbortSignal;
  /** Called after each layer is applied. */
  readonly onLayer?: (digest: string, index: number) => void;
}

export interface UnpackedRootfs {
  readonly dir: string;
  readonly specials: ReadonlyMap<string, SpecialNode>;
  readonly xattrs: ReadonlyMap<string, Xattrs>;
  /** Layer mtimes of the directories holding device nodes or FIFOs (creating those inside the image changes them). */
  readonly specialParentMtimes: ReadonlyMap<string, number>;
  /** Entries and file bytes summed over all layers: an upper bound of what the final tree holds. */
  readonly entries: number;
  readonly fileBytes: number;
  readonly droppedXattrs: number;
}

/** Unpacks every layer and injects the guest agent. Throws on the first unsafe or malformed entry. */
export async function unpackRootfs(options: UnpackOptions): Promise<UnpackedRootfs> {
  const tree = new ConfinedTree(options.target);
  await chown(options.target, 0, 0);
  await chmod(options.target, 0o755);
  const budget = new LayerBudget(options.limits);
  let fileBytes = 0;
  let droppedXattrs = 0;
  for (const [index, layer] of options.layers.entries()) {
    options.signal?.throwIfAborted();
    const stats = await applyLayer(tree, layer, budget, options.signal);
    fileBytes += stats.fileBytes;
    droppedXattrs += stats.droppedXattrs;
    options.onLayer?.(layer.digest, index);
  }
  await injectGuestAgent(tree, options.guestAgentPath, options.guestAgentDigest);
  await ensureMountPoints(tree);
  await tree.finish();
  const specialParentMtimes = new Map<string, number>();
  for (const key of tree.specials().keys()) {
    const parent = key.includes("/") ? key.slice(0, key.lastIndexOf("/")) : "";
    const mtime = tree.dirMtime(parent);
    if (mtime !== undefined) specialParentMtimes.set(parent, mtime);
  }
  return { dir: options.target, specials: tree.specials(), xattrs: tree.xattrs(), specialParentMtimes, entries: budget.entries + 2, fileBytes, droppedXattrs };
}

/**
 * Directories the guest agent mounts over while the base is still the (read-only) root: `/proc` and
 * `/dev` before the overlay exists, `/run` for its staging tmpfs (docs/guest-protocol.md, "Guest
 * boot"); `/sys` and `/tmp` for completeness, as container runtimes create them. A missing one is
 * created; a non-directory there (the image's own business otherwise) is replaced, because the
 * guest cannot fix a read-only base. `/.imp/oldroot` and `/.imp/scratch` are where the guest parks
 * the old root and the scratch mount after `pivot_root`.
 */
const MOUNT_POINTS: readonly (readonly [string, number])[] = [["dev", 0o755], ["proc", 0o555], ["sys", 0o555], ["run", 0o755], ["tmp", 0o1777]];

async function ensureMountPoints(tree: ConfinedTree): Promise<void> {
  for (const [name, mode] of MOUNT_POINTS) {
    const info = await tree.lstat([name]);
    if (info?.isDirectory() !== true) await tree.directory([name], { mode, uid: 0, gid: 0, mtime: 0 });
  }
  for (const name of ["oldroot", "scratch"]) await tree.directory([GUEST_AGENT_DIR, name], { mode: 0o700, uid: 0, gid: 0, mtime: 0 });
}

/**
 * Replaces whatever the image has at `/.imp` (a directory, a file, or a symlink that could redirect
 * the write) with a fresh root-owned directory holding only the guest agent.
 */
async function injectGuestAgent(tree: ConfinedTree, source: string, digest: string | undefined): Promise<void> {
  const dir = [GUEST_AGENT_DIR];
  await tree.remove(dir);
  const abs = tree.abs(dir);
  await mkdir(abs, { mode: 0o755 });
  await chown(abs, 0, 0);
  await chmod(abs, 0o755);
  const dest = join(abs, GUEST_AGENT_NAME);
  try {
    // COPYFILE_EXCL: `dest` cannot exist in the directory just made; fail rather than write through anything.
    await copyFile(source, dest, constants.COPYFILE_EXCL);
  } catch (err) {
    throw terminalError("GuestAgentMissing", `Cannot inject the guest agent from ${source}: ${(err as Error).message}`, { cause: err, context: { source } });
  }
  // Hash the copy, not the source: these are the bytes that end up in the image.
  if (digest !== undefined) await verifyFile(dest, digest, `the guest agent ${source}`);
  await chown(dest, 0, 0);
  await chmod(dest, 0o755);
}
