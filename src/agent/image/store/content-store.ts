/**
 * The node's content store: blobs addressed by sha256 digest under `<root>/blobs/sha256/<hex>`.
 *
 * A blob file exists only when its bytes were verified: `write` streams into a temp file in the same
 * directory (`.tmp-<pid>-<host tag>-<random>`), counts and hashes every byte, stops as soon as the stream exceeds
 * the expected size, fsyncs, checks digest and size, then renames into place and fsyncs the directory.
 * An interrupted write (abort, crash, power loss) leaves at most a temp file, never a blob that looks
 * complete; `open` removes temp files whose writer process is gone or that are older than an hour.
 */
import { createReadStream, type ReadStream } from "node:fs";
import { mkdir, open, readdir, rm, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { processState, terminalError } from "../../../shared/index.ts";
import { BlobWriter, HOST_TAG, TEMP_PREFIX } from "./blob-writer.ts";
import { sha256Hex } from "./digest.ts";

/** What a blob must be: the store refuses to keep anything else. */
export interface ExpectedBlob {
  readonly digest: string;
  readonly size: number;
}

export interface StoredBlob {
  readonly digest: string;
  readonly size: number;
}

export interface WriteOptions {
  readonly signal?: AbortSignal;
  /** Called with the running byte count after each chunk is written. */
  readonly onBytes?: (written: number) => void;
}

/** The store's contract, implemented by `FsContentStore`; the image build side reads blobs through it. */
export interface ContentStore {
  readonly root: string;
  /** True when a verified blob with this digest is present. */
  has(digest: string): Promise<boolean>;
  /** Where the blob lives (whether or not it is present). Read-only use: never write through it. */
  path(digest: string): string;
  /** A stream of the blob's bytes; rejects with code `BlobNotFound` when absent. */
  openRead(digest: string): Promise<ReadStream>;
  /** Reads a whole blob into memory; rejects when it is larger than `maxBytes`. */
  readBytes(digest: string, maxBytes: number): Promise<Buffer>;
  /**
   * Streams `source` into the store and keeps it only if it has exactly `expected.size` bytes hashing
   * to `expected.digest`. Rejects with code `DigestMismatch` or `SizeMismatch` (terminal) otherwise,
   * leaving no blob. A blob already present is not rewritten (the source is not read).
   */
  write(expected: ExpectedBlob, source: AsyncIterable<Uint8Array>, options?: WriteOptions): Promise<void>;
  /**
   * For writers that append in rounds (resumed downloads): a `BlobWriter` on a fresh temp file, or
   * undefined when the blob is already present. The caller must `commit` or `discard` it.
   */
  begin(expected: ExpectedBlob): Promise<BlobWriter | undefined>;
  /** Every blob present with its size. */
  list(): Promise<StoredBlob[]>;
  /** Removes a blob; false when it was not there. */
  remove(digest: string): Promise<boolean>;
}

const STALE_TEMP_MS = 60 * 60 * 1000;

export class FsContentStore implements ContentStore {
  readonly root: string;
  readonly #dir: string;

  private constructor(root: string) {
    this.root = root;
    this.#dir = join(root, "blobs", "sha256");
  }

  /** Opens (creating if needed) the store at `root` and removes stale temp files of dead writers. */
  static async open(root: string): Promise<FsContentStore> {
    const store = new FsContentStore(root);
    await mkdir(store.#dir, { recursive: true, mode: 0o755 });
    await store.#removeStaleTemps();
    return store;
  }

  path(digest: string): string {
    return join(this.#dir, sha256Hex(digest));
  }

  async has(digest: string): Promise<boolean> {
    try {
      return (await stat(this.path(digest))).isFile();
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  async openRead(digest: string): Promise<ReadStream> {
    const path = this.path(digest);
    const handle = await open(path, "r").catch((err: unknown) => {
      throw isNotFound(err) ? blobNotFound(digest) : err;
    });
    return handle.createReadStream();
  }

  async readBytes(digest: string, maxBytes: number): Promise<Buffer> {
    const path = this.path(digest);
    const info = await stat(path).catch((err: unknown) => {
      throw isNotFound(err) ? blobNotFound(digest) : err;
    });
    if (info.size > maxBytes) {
      throw terminalError("BlobTooLarge", `Cannot read blob ${digest}: ${info.size} bytes is more than the limit of ${maxBytes}`, { context: { digest } });
    }
    const chunks: Buffer[] = [];
    for await (const chunk of createReadStream(path)) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async write(expected: ExpectedBlob, source: AsyncIterable<Uint8Array>, options: WriteOptions = {}): Promise<void> {
    const writer = await this.begin(expected);
    if (writer === undefined) return;
    try {
      await writer.append(source, options);
      options.signal?.throwIfAborted();
    } catch (err) {
      await writer.discard();
      throw err;
    }
    await writer.commit();
  }

  async begin(expected: ExpectedBlob): Promise<BlobWriter | undefined> {
    const hex = sha256Hex(expected.digest);
    if (await this.has(expected.digest)) return undefined;
    return BlobWriter.create(this.#dir, expected, hex);
  }

  async list(): Promise<StoredBlob[]> {
    const blobs: StoredBlob[] = [];
    for (const name of await readdir(this.#dir)) {
      if (!/^[0-9a-f]{64}$/.test(name)) continue;
      const info = await stat(join(this.#dir, name)).catch(() => undefined);
      if (info?.isFile() === true) blobs.push({ digest: `sha256:${name}`, size: info.size });
    }
    return blobs;
  }

  async remove(digest: string): Promise<boolean> {
    try {
      await unlink(this.path(digest));
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /** Temp files of this store that are present now (for tests and diagnostics). */
  async tempFiles(): Promise<string[]> {
    return (await readdir(this.#dir)).filter((name) => name.startsWith(TEMP_PREFIX));
  }

  async #removeStaleTemps(): Promise<void> {
    const now = Date.now();
    for (const name of await this.tempFiles()) {
      const [pidText, hostTag] = name.slice(TEMP_PREFIX.length).split("-");
      const pid = hostTag === HOST_TAG ? Number(pidText) : Number.NaN;
      const info = await stat(join(this.#dir, name)).catch(() => undefined);
      if (info === undefined) continue;
      const writerGone = !Number.isInteger(pid) || pid === process.pid ? false : processState(pid) === "gone";
      if (writerGone || now - info.mtimeMs > STALE_TEMP_MS) await rm(join(this.#dir, name), { force: true });
    }
  }
}


const isNotFound = (err: unknown): boolean => (err as NodeJS.ErrnoException | undefined)?.code === "ENOENT";

const blobNotFound = (digest: string): Error =>
  terminalError("BlobNotFound", `Cannot read blob ${digest}: it is not in the content store`, { context: { digest } });
