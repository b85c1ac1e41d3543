/**
 * What `ConfinedTree` knows about its tree besides the files themselves: which paths are real
 * directories (so ancestor checks can skip an lstat), the layer metadata of directories (applied last),
 * and the device nodes and xattrs only the ext4 step can materialise. Every entry describes a path
 * that exists now, so whatever removes or replaces a path must `forget` it, with everything below it.
 */
import { isAtOrBelow } from "./entry-path.ts";

/** Ownership, permission bits (including setuid/setgid/sticky) and mtime of one entry. */
export interface EntryMeta {
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  /** Seconds since the epoch (fractions kept). */
  readonly mtime: number;
}

export type SpecialKind = "char" | "block" | "fifo";

/** A device node or FIFO to create inside the image (see confined-tree.ts). */
export interface SpecialNode extends EntryMeta {
  readonly kind: SpecialKind;
  readonly major: number;
  readonly minor: number;
}

/** Extended attributes to set on a path inside the image, by name. */
export type Xattrs = Readonly<Record<string, Buffer>>;

export class TreeRecords {
  /** Keys of entries known to be real directories (not symlinks) right now; "" is the root. */
  readonly dirs = new Set<string>([""]);
  readonly dirMeta = new Map<string, EntryMeta>();
  readonly specials = new Map<string, SpecialNode>();
  readonly xattrs = new Map<string, Xattrs>();

  /**
   * Drops every record of `key` and of everything below it. Called whatever was (or was not) at `key`:
   * a stale directory record must never survive, because it would let an ancestor check skip its lstat.
   * Invariant that keeps this cheap for files: a record below `key` exists only while `key` is in
   * `dirs` (records are made after the ancestors were checked or created, which adds them to `dirs`,
   * and a key leaves `dirs` only here, together with everything below it).
   */
  forget(key: string): void {
    if (key === "") throw new Error("Cannot forget the root of a tree");
    const wasDir = this.dirs.delete(key);
    this.specials.delete(key);
    this.xattrs.delete(key);
    this.dirMeta.delete(key);
    if (!wasDir) return;
    for (const map of [this.specials, this.xattrs, this.dirMeta]) {
      for (const other of map.keys()) if (isAtOrBelow(other, key)) map.delete(other);
    }
    for (const other of this.dirs) if (isAtOrBelow(other, key)) this.dirs.delete(other);
  }
}
