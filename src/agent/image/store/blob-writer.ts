/**
 * One blob being written into the store: a temp file in the blob directory plus the running sha256 of
 * what it holds. Bytes can be appended in several rounds (a download resumed with a Range request
 * continues the same hash), and the blob becomes visible only through `commit`, which checks size and
 * digest, fsyncs and renames. `discard` removes the temp file; so does any failed commit.
 */
import { createHash, randomBytes, type Hash } from "node:crypto";
import { open, rename, unlink, type FileHandle } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import type { ExpectedBlob, WriteOptions } from "./content-store.ts";

export const TEMP_PREFIX = ".tmp-";
/**
 * Temp names carry the writer's pid and a tag of its host name, so a store shared between PID
 * namespaces (agent container, CLI on the host) only trusts the "writer is dead" check for its own.
 */
export const HOST_TAG = createHash("sha256").update(hostname()).digest("hex").slice(0, 8);
export const tempName = (pid: number): string => `${TEMP_PREFIX}${pid}-${HOST_TAG}-${randomBytes(6).toString("hex")}`;
// Network chunks are small (~64 KiB); writing ~1 MiB batches halves the syscall cost.
const WRITE_BATCH_BYTES = 1024 * 1024;

export class BlobWriter {
  readonly expected: ExpectedBlob;
  readonly #dir: string;
  readonly #temp: string;
  readonly #finalName: string;
  #handle: FileHandle;
  #hash: Hash = createHash("sha256");
  #written = 0;
  #closed = false;

  private constructor(dir: string, expected: ExpectedBlob, finalName: string, temp: string, handle: FileHandle) {
    this.#dir = dir;
    this.expected = expected;
    this.#finalName = finalName;
    this.#temp = temp;
    this.#handle = handle;
  }

  static async create(dir: string, expected: ExpectedBlob, finalName: string): Promise<BlobWriter> {
    const temp = join(dir, tempName(process.pid));
    return new BlobWriter(dir, expected, finalName, temp, await open(temp, "wx", 0o644));
  }

  /** Bytes safely in the temp file and in the hash; a resumed download asks for the rest from here. */
  get written(): number {
    return this.#written;
  }

  /**
   * Appends `source`. Stops with a terminal `SizeMismatch` as soon as the total passes the expected
   * size. If the source fails midway, what was received is still kept (so the caller can resume).
   */
  async append(source: AsyncIterable<Uint8Array>, options: WriteOptions = {}): Promise<void> {
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    const flush = async (): Promise<void> => {
      if (pendingBytes === 0) return;
      const batch = pending.length === 1 ? (pending[0] as Uint8Array) : Buffer.concat(pending, pendingBytes);
      pending = [];
      pendingBytes = 0;
      await this.#handle.write(batch);
      this.#hash.update(batch);
      this.#written += batch.byteLength;
    };
    try {
      for await (const chunk of source) {
        options.signal?.throwIfAborted();
        if (this.#written + pendingBytes + chunk.byteLength > this.expected.size) {
          pending = [];
          pendingBytes = 0;
          throw this.#sizeMismatch(`more than ${this.expected.size} bytes`);
        }
        pending.push(chunk);
        pendingBytes += chunk.byteLength;
        if (pendingBytes >= WRITE_BATCH_BYTES) await flush();
        options.onBytes?.(this.#written + pendingBytes);
      }
    } finally {
      await flush();
    }
  }

  /** Starts over (the server ignored our Range request and sent the whole blob). */
  async reset(): Promise<void> {
    await this.#handle.truncate(0);
    await this.#handle.close();
    this.#handle = await open(this.#temp, "r+");
    this.#hash = createHash("sha256");
    this.#written = 0;
  }

  /** Verifies size and digest, makes the blob durable and visible. Discards it on any failure. */
  async commit(): Promise<void> {
    try {
      if (this.#written !== this.expected.size) throw this.#sizeMismatch(`${this.#written} bytes`);
      const actual = `sha256:${this.#hash.digest("hex")}`;
      if (actual !== this.expected.digest) {
        throw terminalError("DigestMismatch", `Cannot store blob ${this.expected.digest}: its content hashes to ${actual}`, {
          context: { expected: this.expected.digest, actual },
        });
      }
      await this.#handle.sync();
      await this.#handle.close();
      this.#closed = true;
      await rename(this.#temp, join(this.#dir, this.#finalName));
    } catch (err) {
      await this.discard();
      throw err;
    }
    const dir = await open(this.#dir, "r");
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }

  /** Removes the temp file; safe to call more than once. */
  async discard(): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      await this.#handle.close().catch(() => undefined);
    }
    await unlink(this.#temp).catch(() => undefined);
  }

  #sizeMismatch(got: string): Error {
    return terminalError("SizeMismatch", `Cannot store blob ${this.expected.digest}: expected ${this.expected.size} bytes, got ${got}`, {
      context: { digest: this.expected.digest, expectedSize: this.expected.size },
    });
  }
}
