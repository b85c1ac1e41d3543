/**
 * Applies one layer blob to a `ConfinedTree` with the OCI layer rules (image-spec layer.md):
 * entries in tar order, whiteouts (`.wh.<name>`) delete from lower layers, an opaque marker
 * (`.wh..wh..opq`) hides everything lower layers put in its directory, hard links, symlinks, modes
 * with setuid/setgid/sticky, ownership, mtimes, and the xattrs we keep.
 *
 * Decisions (documented in docs/images.md):
 * - A path that appears twice in one layer is refused (`LayerDuplicateEntry`), instead of "last wins":
 *   no layer producer emits duplicates, and refusing them removes a class of order-dependent tricks.
 * - A whiteout that would delete something the same layer created is refused (whiteouts only apply
 *   to lower layers).
 * - Kept xattrs: `security.capability` and `user.*` whose names are printable ASCII without quotes
 *   or backslashes (they appear in the debugfs script); others (SELinux labels, `trusted.*` overlay
 *   bookkeeping, odd names) are dropped and counted.
 * - The compressed bytes are hashed as they stream; a blob whose sha256 is not `layer.digest` fails
 *   the layer with `DigestMismatch` (the digest is in the cache key, so the bytes must be the ones it names).
 */
import { pipeline } from "node:stream/promises";
import type { Stats } from "node:fs";
import type { Readable } from "node:stream";
import { extract as tarExtract, type Header } from "tar-stream";
import { ImpError, terminalError, type ImpErrorCode } from "../../../shared/index.ts";
import type { ConfinedTree, EntryMeta, SpecialKind, Xattrs } from "./confined-tree.ts";
import { compressionOf, decompressor } from "./decompress.ts";
import { entryMeaning, parseEntryPath, pathKey, type EntryPath } from "./entry-path.ts";
import type { LayerBudget } from "./limits.ts";
import { PaxXattrTap } from "./pax-xattr-tap.ts";
import { digestMismatch, digestOfStream, verifyingStream } from "./verify-digest.ts";

/** A layer blob to apply: its digest (for messages and the cache key), media type and bytes. */
export interface LayerBlob {
  readonly digest: string;
  readonly mediaType: string;
  /** Compressed size when known (used to guess whether the image fits in memory staging). */
  readonly size?: number;
  /** Opens a fresh stream of the (compressed) blob. */
  open(): Promise<Readable>;
}

export interface LayerStats {
  readonly entries: number;
  readonly fileBytes: number;
  readonly droppedXattrs: number;
}

/** tar-stream decodes PAX records into `pax` (as UTF-8 strings). */
type TarHeader = Header & { readonly pax?: Readonly<Record<string, string>> | null };

async function collect(content: AsyncIterable<Buffer>, size: number): Promise<Buffer> {
  const data = Buffer.allocUnsafe(size);
  let at = 0;
  for await (const chunk of content) {
    if (at + chunk.length > size) throw new Error("a tar entry delivered more bytes than its header says");
    chunk.copy(data, at);
    at += chunk.length;
  }
  return at === size ? data : data.subarray(0, at);
}

const SAFE_SPECIAL_NAME = /^[\x20-\x7e]+$/;

/** Applies `layer` on top of `tree`. On error the tree is left partly written; the caller discards it. */
export async function applyLayer(tree: ConfinedTree, layer: LayerBlob, budget: LayerBudget, signal?: AbortSignal): Promise<LayerStats> {
  const compression = compressionOf(layer.mediaType);
  const verifier = verifyingStream(layer.digest, `layer ${layer.digest}`);
  const input = await layer.open();
  const meter = budget.meter(layer.digest);
  const extract = tarExtract();
  const tap = new PaxXattrTap();
  const piped = pipeline(input, verifier, meter.compressed, decompressor(compression), meter.uncompressed, tap, extract, signal === undefined ? {} : { signal });
  // Observed below; this handler only stops an early rejection from counting as unhandled.
  piped.catch(() => undefined);
  const state = new LayerState(tree, layer.digest, budget, tap);
  try {
    for await (const entry of extract) {
      await state.apply(entry.header as TarHeader, entry as unknown as AsyncIterable<Buffer>);
      entry.resume();
    }
    await piped;
    await tree.drain();
  } catch (err) {
    input.destroy();
    await tree.settle();
    const pipeErr = await piped.then(() => undefined, (e: unknown) => e);
    if (err instanceof ImpError) throw err;
    if (pipeErr instanceof ImpError) throw pipeErr;
    // Malformed data may be a blob that is not what its digest names: say so when that is the cause.
    if (signal?.aborted !== true) await throwIfBlobDiffers(layer);
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENAMETOOLONG") {
      throw terminalError("LayerPathTooLong", `Cannot apply layer ${layer.digest}: a path is too long to create below the build directory (${(err as Error).message})`, {
        cause: err, context: { layer: layer.digest },
      });
    }
    throw terminalError("LayerApplyFailed", `Cannot apply layer ${layer.digest}: ${(err as Error).message}`, { cause: err, context: { layer: layer.digest } });
  }
  return { entries: state.entries, fileBytes: state.fileBytes, droppedXattrs: state.droppedXattrs };
}

/** Re-reads the blob after a failure and throws `DigestMismatch` when its bytes are not the digest's. */
async function throwIfBlobDiffers(layer: LayerBlob): Promise<void> {
  const actual = await layer.open().then(digestOfStream, () => undefined);
  if (actual !== undefined && actual !== layer.digest) throw digestMismatch(`layer ${layer.digest}`, layer.digest, actual);
}

class LayerState {
  readonly #tree: ConfinedTree;
  readonly #layer: string;
  readonly #budget: LayerBudget;
  readonly #tap: PaxXattrTap;
  #index = 0;
  /** Paths this layer created, and their ancestors (an opaque marker keeps both). */
  readonly #touched = new Set<string>();
  readonly #touchedAncestors = new Set<string>();
  entries = 0;
  fileBytes = 0;
  droppedXattrs = 0;

  constructor(tree: ConfinedTree, layer: string, budget: LayerBudget, tap: PaxXattrTap) {
    this.#tree = tree;
    this.#layer = layer;
    this.#budget = budget;
    this.#tap = tap;
  }

  async apply(header: TarHeader, content: AsyncIterable<Buffer>): Promise<void> {
    this.#budget.countEntry(this.#layer);
    this.entries++;
    const raw = this.#tap.xattrsOf(this.#index++, header.name);
    const meaning = entryMeaning(header.name);
    switch (meaning.kind) {
      case "ignored":
        return;
      case "whiteout":
        return this.#whiteout(meaning.path);
      case "opaque":
        return this.#opaque(meaning.dir);
      case "path":
        return this.#entry(meaning.path, header, content, raw);
    }
  }

  async #whiteout(path: EntryPath): Promise<void> {
    const key = pathKey(path);
    if (this.#touched.has(key) || this.#touchedAncestors.has(key)) {
      throw this.#error("LayerWhiteoutConflict", path, "a whiteout in this layer would delete what the same layer created");
    }
    if (await this.#tree.checkAncestors(path, false)) await this.#tree.remove(path);
  }

  async #opaque(dir: EntryPath): Promise<void> {
    const info = dir.length === 0 ? undefined : await this.#existingAfterCheck(dir);
    if (dir.length > 0 && info?.isDirectory() !== true) {
      await this.#tree.directory(dir, { mode: 0o755, uid: 0, gid: 0, mtime: 0 });
      this.#touch(dir);
      return;
    }
    await this.#tree.clearBelow(dir, (key) => this.#touched.has(key) || this.#touchedAncestors.has(key));
  }

  async #existingAfterCheck(path: EntryPath): Promise<Stats | undefined> {
    return (await this.#tree.checkAncestors(path, true)) ? this.#tree.lstat(path) : undefined;
  }

  async #entry(path: EntryPath, header: TarHeader, content: AsyncIterable<Buffer>, raw: ReadonlyMap<string, Buffer> | undefined): Promise<void> {
    const key = pathKey(path);
    if (this.#touched.has(key)) throw this.#error("LayerDuplicateEntry", path, "the path appears twice in this layer (duplicates are refused)");
    this.#touch(path);
    const meta = metaOf(header);
    switch (header.type) {
      case "file":
      case "contiguous-file":
        if ((header.size ?? 0) <= this.#tree.maxBufferedBytes) {
          const data = await collect(content, header.size ?? 0);
          await this.#tree.fileFromBuffer(path, meta, data);
          this.fileBytes += data.length;
        } else {
          this.fileBytes += await this.#tree.file(path, meta, content);
        }
        break;
      case "directory":
        await this.#tree.directory(path, meta);
        break;
      case "symlink":
        await this.#tree.symlink(path, header.linkname ?? "", meta);
        break;
      case "link":
        await this.#tree.hardlink(path, parseEntryPath(header.linkname ?? "", "hard link target"));
        break;
      case "character-device":
      case "block-device":
      case "fifo":
        await this.#special(path, header, meta);
        break;
      default:
        throw this.#error("LayerUnsupportedEntry", path, `its tar type ${JSON.stringify(header.type)} is not supported`);
    }
    if (header.type !== "link") this.#xattrsOf(path, header, raw);
  }

  async #special(path: EntryPath, header: TarHeader, meta: EntryMeta): Promise<void> {
    // The ext4 step names these paths in a debugfs script; refuse anything that could escape its quoting.
    if (!SAFE_SPECIAL_NAME.test(pathKey(path)) || /["\\]/.test(pathKey(path))) {
      throw this.#error("LayerUnsupportedEntry", path, "device and FIFO names must be printable ASCII without quotes or backslashes");
    }
    const kind: SpecialKind = header.type === "character-device" ? "char" : header.type === "block-device" ? "block" : "fifo";
    await this.#tree.special(path, { ...meta, kind, major: header.devmajor ?? 0, minor: header.devminor ?? 0 });
  }

  /**
   * Kept xattrs of an entry. Values come byte-exact from the tap (`raw`); when the tap could not follow
   * the stream, from tar-stream's UTF-8 decoding, where a value with U+FFFD did not survive and is dropped.
   */
  #xattrsOf(path: EntryPath, header: TarHeader, raw: ReadonlyMap<string, Buffer> | undefined): void {
    const kept: Record<string, Buffer> = {};
    const decoded = Object.entries(header.pax ?? {}).filter(([name]) => name.startsWith("SCHILY.xattr."));
    for (const [name, text] of decoded) {
      const attr = name.slice("SCHILY.xattr.".length);
      const value = raw?.get(attr) ?? (text.includes("\uFFFD") ? undefined : Buffer.from(text, "utf8"));
      // The name appears in the debugfs script: quotes and backslashes cannot be quoted there.
      const keep = (attr === "security.capability" || attr.startsWith("user.")) && value !== undefined && /^[\x21-\x7e]+$/.test(attr) && !/["\\]/.test(attr);
      if (keep && SAFE_SPECIAL_NAME.test(pathKey(path)) && !/["\\]/.test(pathKey(path))) kept[attr] = value;
      else this.droppedXattrs++;
    }
    this.#tree.setXattrs(path, kept as Xattrs);
  }

  #touch(path: EntryPath): void {
    this.#touched.add(pathKey(path));
    for (let depth = 0; depth < path.length; depth++) this.#touchedAncestors.add(pathKey(path.slice(0, depth)));
  }

  #error(code: ImpErrorCode, path: EntryPath, why: string): ImpError {
    return terminalError(code, `Cannot apply layer ${this.#layer} entry ${JSON.stringify(pathKey(path))}: ${why}`, {
      context: { layer: this.#layer, path: pathKey(path) },
    });
  }
}

/** Ownership, mode and mtime of a tar header, with PAX overrides (large ids, sub-second mtimes). */
function metaOf(header: TarHeader): EntryMeta {
  const pax = header.pax ?? {};
  const num = (value: string | undefined, fallback: number): number => {
    const parsed = value === undefined ? NaN : Number(value);
    return Number.isFinite(parsed) && parsed >= 0 ? parsed : fallback;
  };
  const mtime = header.mtime === undefined ? 0 : header.mtime.getTime() / 1000;
  return {
    mode: (header.mode ?? 0o644) & 0o7777,
    uid: Math.floor(num(pax.uid, header.uid ?? 0)),
    gid: Math.floor(num(pax.gid, header.gid ?? 0)),
    mtime: num(pax.mtime, mtime),
  };
}
