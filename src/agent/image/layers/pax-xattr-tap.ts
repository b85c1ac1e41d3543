/**
 * Recovers extended attributes from PAX headers byte-exactly. tar-stream decodes PAX values as UTF-8,
 * which corrupts binary values such as `security.capability`. This pass-through stream sits in front
 * of tar-stream, follows the tar block structure (headers, PAX/GNU meta entries, data and padding)
 * just far enough to keep the raw `SCHILY.xattr.*` records of each entry, and hands them out by entry
 * index. It never changes the bytes and never decides anything about paths: `take()` returns the
 * raw values only when the name it saw matches the name tar-stream reports, so a disagreement between
 * the two parsers can only lose xattrs, never attach them to another file. Anything it cannot follow
 * turns it off for the rest of the stream (the decoded values are used then).
 */
import { Transform, type TransformCallback } from "node:stream";

const BLOCK = 512;
const MAX_META_BYTES = 1024 * 1024;
const XATTR = Buffer.from("SCHILY.xattr.");

interface Tapped {
  readonly name: string;
  readonly xattrs: ReadonlyMap<string, Buffer>;
}

type State =
  | { readonly kind: "header" }
  | { readonly kind: "skip"; left: number }
  | { readonly kind: "meta"; readonly type: "x" | "L" | "other"; readonly size: number; readonly padded: number };

export class PaxXattrTap extends Transform {
  #state: State = { kind: "header" };
  #pending: Buffer = Buffer.alloc(0);
  #broken = false;
  #localPax: Map<string, Buffer> | undefined;
  #longName: string | undefined;
  #entry = 0;
  readonly #found = new Map<number, Tapped>();

  /** The raw xattrs of entry number `index` (0-based, real entries only) if its name is `name`. */
  xattrsOf(index: number, name: string): ReadonlyMap<string, Buffer> | undefined {
    const found = this.#found.get(index);
    this.#found.delete(index);
    return found !== undefined && found.name === name ? found.xattrs : undefined;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (!this.#broken) {
      try {
        this.#feed(chunk);
      } catch {
        this.#broken = true;
        this.#found.clear();
      }
    }
    done(null, chunk);
  }

  #feed(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      const state = this.#state;
      if (state.kind === "skip") {
        const n = Math.min(state.left, chunk.length - at);
        state.left -= n;
        at += n;
        if (state.left === 0) this.#state = { kind: "header" };
        continue;
      }
      const need = state.kind === "header" ? BLOCK : state.padded;
      const n = Math.min(need - this.#pending.length, chunk.length - at);
      this.#pending = Buffer.concat([this.#pending, chunk.subarray(at, at + n)]);
      at += n;
      if (this.#pending.length < need) continue;
      const block = this.#pending;
      this.#pending = Buffer.alloc(0);
      if (state.kind === "header") this.#header(block);
      else this.#meta(state, block.subarray(0, state.size));
    }
  }

  #header(block: Buffer): void {
    if (block.every((b) => b === 0)) return; // end-of-archive padding
    const type = String.fromCharCode(block[156] ?? 0);
    let size = parseSize(block.subarray(124, 136));
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (size > MAX_META_BYTES) throw new Error("meta entry too large");
      this.#state = size === 0 ? { kind: "header" } : { kind: "meta", type: type === "x" ? "x" : type === "L" ? "L" : "other", size, padded: roundUp(size) };
      return;
    }
    const pax = this.#localPax;
    const paxSize = pax?.get("size");
    if (paxSize !== undefined) size = Number(paxSize.toString("latin1"));
    const paxPath = pax?.get("path");
    const name = paxPath !== undefined ? paxPath.toString("utf8") : (this.#longName ?? ustarName(block));
    const xattrs = new Map<string, Buffer>();
    for (const [key, value] of pax ?? []) if (key.startsWith("SCHILY.xattr.")) xattrs.set(key.slice(XATTR.length), value);
    if (xattrs.size > 0) this.#found.set(this.#entry, { name, xattrs });
    this.#entry++;
    this.#localPax = undefined;
    this.#longName = undefined;
    // Directories carry no data whatever their size field says (as tar-stream reads them; old tars mark them with a trailing "/").
    const isDir = type === "5" || ((type === "0" || type === "\0") && ustarName(block).endsWith("/"));
    const dataBytes = isDir ? 0 : roundUp(size);
    if (!Number.isSafeInteger(dataBytes) || dataBytes < 0) throw new Error("bad size");
    this.#state = dataBytes === 0 ? { kind: "header" } : { kind: "skip", left: dataBytes };
  }

  #meta(state: Extract<State, { kind: "meta" }>, data: Buffer): void {
    if (state.type === "x") this.#localPax = parsePax(data);
    if (state.type === "L") {
      const end = data.indexOf(0);
      this.#longName = data.toString("utf8", 0, end < 0 ? data.length : end);
    }
    this.#state = { kind: "header" };
  }
}

const roundUp = (n: number): number => Math.ceil(n / BLOCK) * BLOCK;

function parseSize(field: Buffer): number {
  if (((field[0] ?? 0) & 0x80) !== 0) {
    let value = 0;
    for (let i = 1; i < field.length; i++) value = value * 256 + (field[i] ?? 0);
    return value;
  }
  const text = field.toString("latin1").replace(/[\0 ]+$/, "").trim();
  return text === "" ? 0 : parseInt(text, 8);
}

function ustarName(block: Buffer): string {
  const cstr = (from: number, to: number): string => {
    const end = block.indexOf(0, from);
    return block.toString("utf8", from, end < 0 || end > to ? to : end);
  };
  const name = cstr(0, 100);
  const magic = block.toString("latin1", 257, 263);
  const prefix = magic === "ustar\0" ? cstr(345, 500) : "";
  return prefix === "" ? name : `${prefix}/${name}`;
}

/** PAX records `"<len> <key>=<value>\n"` with values kept as raw bytes. */
export function parsePax(data: Buffer): Map<string, Buffer> {
  const records = new Map<string, Buffer>();
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    if (space < 0) break;
    const length = Number(data.toString("latin1", at, space));
    if (!Number.isSafeInteger(length) || length <= 0 || at + length > data.length) throw new Error("bad PAX record");
    const record = data.subarray(space + 1, at + length - 1);
    const eq = record.indexOf(0x3d);
    if (eq < 0) throw new Error("bad PAX record");
    records.set(record.toString("utf8", 0, eq), Buffer.from(record.subarray(eq + 1)));
    at += length;
  }
  return records;
}
