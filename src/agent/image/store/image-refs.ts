/**
 * Which images the node has pulled: one JSON record per reference under `<root>/refs/`, written
 * atomically (temp file, fsync, rename) so `imp image ls` never sees a half-written record. The record
 * is the `PulledImage` of the pull plus when it happened; the blobs it names live in the content store.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, readdir, readFile, rename, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { PulledImage } from "../pull/types.ts";

export interface ImageRecord extends PulledImage {
  /** ISO time of the pull that wrote this record. */
  readonly pulledAt: string;
}

const MAX_RECORD_BYTES = 4 * 1024 * 1024;

export class ImageRefs {
  readonly #dir: string;

  constructor(storeRoot: string) {
    this.#dir = join(storeRoot, "refs");
  }

  /** Records (or replaces) the image a reference resolved to. */
  async put(record: ImageRecord): Promise<void> {
    await mkdir(this.#dir, { recursive: true, mode: 0o755 });
    const temp = join(this.#dir, `.tmp-${process.pid}-${randomBytes(6).toString("hex")}`);
    const handle = await open(temp, "wx", 0o644);
    try {
      await handle.writeFile(JSON.stringify(record, null, 2));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, this.#file(record.reference));
  }

  async get(reference: string): Promise<ImageRecord | undefined> {
    return this.#read(this.#file(reference));
  }

  /** Every recorded image, sorted by reference. Unreadable records are skipped. */
  async list(): Promise<ImageRecord[]> {
    let names: string[];
    try {
      names = await readdir(this.#dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const records: ImageRecord[] = [];
    for (const name of names.filter((n) => n.endsWith(".json"))) {
      const record = await this.#read(join(this.#dir, name));
      if (record !== undefined) records.push(record);
    }
    return records.sort((a, b) => a.reference.localeCompare(b.reference));
  }

  /** Forgets a reference; false when it was not recorded. */
  async remove(reference: string): Promise<boolean> {
    try {
      await unlink(this.#file(reference));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw err;
    }
  }

  // References contain '/', ':' and '@'; a hash makes a safe, fixed-length file name.
  #file(reference: string): string {
    return join(this.#dir, `${createHash("sha256").update(reference).digest("hex")}.json`);
  }

  async #read(path: string): Promise<ImageRecord | undefined> {
    let text: string;
    try {
      const bytes = await readFile(path);
      if (bytes.length > MAX_RECORD_BYTES) return undefined;
      text = bytes.toString("utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
    try {
      const record = JSON.parse(text) as ImageRecord;
      return typeof record.reference === "string" && Array.isArray(record.layers) ? record : undefined;
    } catch {
      return undefined;
    }
  }
}
