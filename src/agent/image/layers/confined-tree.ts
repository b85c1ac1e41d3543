/**
 * The target directory of an extraction, and the only code that writes into it. Every operation
 * takes an already validated `EntryPath` and walks its ancestors itself with `lstat`: an ancestor
 * that is a symlink is an error, never followed (not even when it would resolve inside the target),
 * and the last component is never followed either (files are opened with O_NOFOLLOW|O_EXCL after
 * whatever was there is removed; metadata uses the l* calls or the open handle).
 *
 * Why path-based calls are safe here without openat(2): the target is a fresh directory inside a
 * private (0700) build directory and this object is its only writer, so nothing can swap a checked
 * ancestor for a symlink between the check and the use. Image content is never executed while we build.
 *
 * Device nodes and FIFOs are never created on the host (a hostile image could otherwise plant a
 * world-writable node for the host's disk in the cache): each becomes an empty 0000 placeholder file
 * plus a `SpecialNode` record that the ext4 step turns into a real node inside the image (debugfs).
 * Extended attributes are recorded the same way, because Node has no setxattr.
 */
import { constants, type Stats } from "node:fs";
import { chmod, link, lchown, lstat, lutimes, mkdir, open, readdir, rm, symlink, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import { BackgroundWrites } from "./background-writes.ts";
import { pathKey, type EntryPath } from "./entry-path.ts";
import { TreeRecords, type EntryMeta, type SpecialNode, type Xattrs } from "./tree-records.ts";

export type { EntryMeta, SpecialKind, SpecialNode, Xattrs } from "./tree-records.ts";

const FILE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
const IMPLICIT_DIR: EntryMeta = { mode: 0o755, uid: 0, gid: 0, mtime: 0 };

export class ConfinedTree {
  readonly root: string;
  readonly #records = new TreeRecords();
  /** Small-file writes in flight (see `fileFromBuffer`). */
  readonly #writes: BackgroundWrites;
  /** Files up to this size may go through `fileFromBuffer`; also the bound on buffered bytes in flight. */
  readonly maxBufferedBytes: number;

  /** `root` must be an empty directory that nothing else writes to. */
  constructor(root: string, options: { readonly maxInflightWrites?: number; readonly maxBufferedBytes?: number } = {}) {
    this.root = root;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 1024 * 1024;
    this.#writes = new BackgroundWrites(options.maxInflightWrites ?? 16, 4 * this.maxBufferedBytes);
  }

  /**
   * Waits for every small-file write in flight and rethrows the first failure. Every operation other
   * than creating a new regular file drains first, so background writes only ever create new names at
   * distinct paths where nothing was (a layer never names a path twice), and never overlap a removal,
   * a symlink or a link being made.
   */
  drain(): Promise<void> {
    return this.#writes.drain();
  }

  /** Like `drain()` but never throws: for cleanup after a failure. */
  settle(): Promise<void> {
    return this.#writes.settle();
  }

  /**
   * Writes a regular file whose content is already in memory. When nothing is at `path`, without
   * waiting for it: extraction goes on with the next entry while up to `maxInflightWrites` files are
   * being created; failures surface at the next `drain()`. When something is there (a file, a symlink,
   * a directory with a tree below it) the write replaces it, which is a removal: it drains first and
   * runs synchronously, so no later entry can race the removal (e.g. `P/b0` created while the old
   * directory `P` is being deleted) and the records of the old tree are gone before the next check.
   */
  async fileFromBuffer(path: EntryPath, meta: EntryMeta, data: Buffer): Promise<void> {
    this.#writes.throwIfFailed();
    await this.checkAncestors(path, true);
    if (this.#records.dirs.has(pathKey(path)) || (await this.lstat(path)) !== undefined) {
      await this.drain();
      await this.#writeNew(path, meta, data);
      return;
    }
    await this.#writes.start(data.length, () => this.#writeNew(path, meta, data));
  }

  async #writeNew(path: EntryPath, meta: EntryMeta, data: Buffer): Promise<void> {
    const handle = await this.#createExclusive(path);
    try {
      if (data.length > 0) await handle.write(data, 0, data.length, 0);
      if (meta.uid !== 0 || meta.gid !== 0) await handle.chown(meta.uid, meta.gid);
      await handle.chmod(meta.mode & 0o7777);
      await handle.utimes(meta.mtime, meta.mtime);
    } finally {
      await handle.close();
    }
  }

  /** Device nodes and FIFOs that exist in the tree now, by path key. */
  specials(): ReadonlyMap<string, SpecialNode> {
    return this.#records.specials;
  }

  /** The mtime a layer gave the directory `key` ("" is the root), if any. */
  dirMtime(key: string): number | undefined {
    return this.#records.dirMeta.get(key)?.mtime;
  }

  /** Extended attributes of paths that exist in the tree now, by path key. */
  xattrs(): ReadonlyMap<string, Xattrs> {
    return this.#records.xattrs;
  }

  abs(path: EntryPath): string {
    return join(this.root, ...path);
  }

  /**
   * Checks that every ancestor of `path` is a real directory. Missing ancestors are created (0755
   * root:root, as containerd does) when `create`; otherwise the result is false. Throws
   * `LayerPathThroughSymlink` / `LayerPathNotDirectory` when an ancestor is a symlink or a non-directory.
   */
  async checkAncestors(path: EntryPath, create: boolean): Promise<boolean> {
    for (let depth = 1; depth < path.length; depth++) {
      const ancestor = path.slice(0, depth);
      const key = pathKey(ancestor);
      if (this.#records.dirs.has(key)) continue;
      const info = await this.lstat(ancestor);
      if (info === undefined) {
        if (!create) return false;
        await this.#mkdirNew(ancestor, IMPLICIT_DIR);
        continue;
      }
      if (info.isSymbolicLink()) {
        throw terminalError("LayerPathThroughSymlink", `Cannot apply layer entry ${JSON.stringify(pathKey(path))}: its ancestor ${JSON.stringify(key)} is a symlink, and extraction never follows symlinks`, {
          context: { path: pathKey(path), ancestor: key },
        });
      }
      if (!info.isDirectory()) {
        throw terminalError("LayerPathNotDirectory", `Cannot apply layer entry ${JSON.stringify(pathKey(path))}: its ancestor ${JSON.stringify(key)} is not a directory`, {
          context: { path: pathKey(path), ancestor: key },
        });
      }
      this.#records.dirs.add(key);
    }
    return true;
  }

  /** lstat of the path (never follows), or undefined when it does not exist. Ancestors must be checked. */
  async lstat(path: EntryPath): Promise<Stats | undefined> {
    try {
      return await lstat(this.abs(path));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  /** Removes whatever is at `path` (recursively, never following symlinks). Ancestors must be checked. */
  async remove(path: EntryPath): Promise<void> {
    await this.drain();
    await this.#removeNow(path);
  }

  async #removeNow(path: EntryPath): Promise<void> {
    if (path.length === 0) throw new Error("Cannot remove the root of the tree");
    // rm never follows a symlink at `path`; `force` makes a missing path a no-op. The records go
    // either way: a record of a path that is not there is as stale as one of a replaced tree.
    await rm(this.abs(path), { recursive: true, force: true });
    this.#records.forget(pathKey(path));
  }

  /** Creates or updates the directory at `path`; an existing non-directory there is replaced. */
  async directory(path: EntryPath, meta: EntryMeta): Promise<void> {
    await this.checkAncestors(path, true);
    // Updating or making a directory cannot disturb file writes in flight; replacing a non-directory drains (in remove).
    const info = path.length === 0 ? await lstat(this.root) : await this.lstat(path);
    if (info !== undefined && !info.isDirectory()) await this.remove(path);
    if (info === undefined || !info.isDirectory()) {
      await this.#mkdirNew(path, meta);
    } else {
      await this.#setDirMeta(path, meta);
    }
  }

  /** Writes a regular file from `content`, replacing whatever was at `path`. */
  async file(path: EntryPath, meta: EntryMeta, content: AsyncIterable<Buffer>): Promise<number> {
    await this.drain();
    const handle = await this.#createExclusive(path);
    let written = 0;
    try {
      for await (const chunk of content) {
        await handle.write(chunk);
        written += chunk.length;
      }
      // We run as root, so a new file is already 0:0; chown first because it clears setuid/setgid.
      if (meta.uid !== 0 || meta.gid !== 0) await handle.chown(meta.uid, meta.gid);
      await handle.chmod(meta.mode & 0o7777);
      await handle.utimes(meta.mtime, meta.mtime);
    } finally {
      await handle.close();
    }
    return written;
  }

  /** Creates a symlink with `target` stored verbatim (it is never resolved here). */
  async symlink(path: EntryPath, target: string, meta: EntryMeta): Promise<void> {
    await this.drain();
    await this.#clearSlot(path);
    await symlink(target, this.abs(path));
    if (meta.uid !== 0 || meta.gid !== 0) await lchown(this.abs(path), meta.uid, meta.gid);
    await lutimes(this.abs(path), meta.mtime, meta.mtime);
  }

  /**
   * Makes `path` a hard link to the existing entry `target` (both inside the tree, ancestors of both
   * free of symlinks). A link to a directory is refused; a link to a symlink links the symlink itself
   * (link(2) does not follow); a link to a device/FIFO placeholder records a second identical node.
   */
  async hardlink(path: EntryPath, target: EntryPath): Promise<void> {
    await this.drain();
    const show = `${JSON.stringify(pathKey(path))} -> ${JSON.stringify(pathKey(target))}`;
    const found = (await this.checkAncestors(target, false)) ? await this.lstat(target) : undefined;
    if (found === undefined) {
      throw terminalError("LayerBadHardlink", `Cannot apply layer hard link ${show}: the target does not exist in the image`, { context: { path: pathKey(path) } });
    }
    if (found.isDirectory()) {
      throw terminalError("LayerBadHardlink", `Cannot apply layer hard link ${show}: the target is a directory`, { context: { path: pathKey(path) } });
    }
    if (pathKey(path) === pathKey(target)) return;
    await this.#clearSlot(path);
    await link(this.abs(target), this.abs(path));
    const special = this.#records.specials.get(pathKey(target));
    if (special !== undefined) this.#records.specials.set(pathKey(path), special);
  }

  /** Records a device node or FIFO and leaves an empty 0000 placeholder file at `path`. */
  async special(path: EntryPath, node: SpecialNode): Promise<void> {
    await this.file(path, { ...node, mode: 0 }, emptyContent());
    this.#records.specials.set(pathKey(path), node);
  }

  /** Records extended attributes for an existing entry (set inside the image by the ext4 step). */
  setXattrs(path: EntryPath, xattrs: Xattrs): void {
    if (Object.keys(xattrs).length > 0) this.#records.xattrs.set(pathKey(path), xattrs);
  }

  /**
   * Removes every entry below the directory `dir` for which `keep(key)` is false, descending into kept
   * directories (an opaque whiteout hides lower layers but not the entries of its own layer).
   */
  async clearBelow(dir: EntryPath, keep: (key: string) => boolean): Promise<void> {
    await this.drain();
    for (const entry of await readdir(this.abs(dir), { withFileTypes: true })) {
      const child = [...dir, entry.name];
      if (!keep(pathKey(child))) {
        await this.remove(child);
      } else if (entry.isDirectory()) {
        await this.clearBelow(child, keep);
      }
    }
  }

  /** Sets directory mtimes last (writing into a directory changes its mtime), deepest first. */
  async finish(): Promise<void> {
    await this.drain();
    const keys = [...this.#records.dirMeta.keys()].sort((a, b) => b.split("/").length - a.split("/").length);
    for (const key of keys) {
      const meta = this.#records.dirMeta.get(key);
      const abs = key === "" ? this.root : join(this.root, key);
      const info = await lstat(abs).catch(() => undefined);
      if (meta !== undefined && info?.isDirectory() === true) await lutimes(abs, meta.mtime, meta.mtime);
    }
  }

  /**
   * Opens a new file at `path` with O_EXCL|O_NOFOLLOW. The common case (nothing there) costs one
   * call; whatever is there (file, symlink, directory) is removed first and the open retried.
   */
  async #createExclusive(path: EntryPath): Promise<FileHandle> {
    if (path.length === 0) return this.#clearSlot(path).then(() => open(this.abs(path), FILE_FLAGS, 0o600));
    await this.checkAncestors(path, true);
    try {
      return await open(this.abs(path), FILE_FLAGS, 0o600);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "EEXIST" && code !== "ELOOP" && code !== "EISDIR") throw err;
    }
    await this.#removeNow(path);
    return open(this.abs(path), FILE_FLAGS, 0o600);
  }

  async #clearSlot(path: EntryPath): Promise<void> {
    if (path.length === 0) {
      throw terminalError("LayerBadEntry", "Cannot apply layer entry for the root directory: only a directory may stand there");
    }
    await this.checkAncestors(path, true);
    await this.remove(path);
  }

  async #mkdirNew(path: EntryPath, meta: EntryMeta): Promise<void> {
    await mkdir(this.abs(path), { mode: 0o700 });
    this.#records.dirs.add(pathKey(path));
    await this.#setDirMeta(path, meta, true);
  }

  async #setDirMeta(path: EntryPath, meta: EntryMeta, fresh = false): Promise<void> {
    const abs = this.abs(path);
    // A directory we just made as root is already 0:0.
    if (!fresh || meta.uid !== 0 || meta.gid !== 0) await lchown(abs, meta.uid, meta.gid);
    // chmod follows symlinks, but `abs` was just checked (or made) to be a real directory; see file comment.
    await chmod(abs, meta.mode & 0o7777);
    this.#records.dirMeta.set(pathKey(path), meta);
  }
}

async function* emptyContent(): AsyncIterable<Buffer> {
  // An empty file: nothing to yield.
}
