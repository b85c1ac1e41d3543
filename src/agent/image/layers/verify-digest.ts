/**
 * Verification of bytes while they are used: a sha256 pass-through whose end fails the stream with
 * `DigestMismatch` when the bytes that went through are not the ones the digest names. The build
 * reads a blob (or a local layer file, or the guest agent) after its digest went into the cache key,
 * so a file that changed or a store blob that was corrupted in between must fail the build instead of
 * being cached for good under the old key.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import type { Readable } from "node:stream";
import { Transform, type TransformCallback } from "node:stream";
import { terminalError, type ImpError } from "../../../shared/index.ts";

const SHA256 = /^sha256:([0-9a-f]{64})$/;

/** The hex of a `sha256:<hex>` digest; throws `UnsupportedDigest` for anything else. */
export function sha256Hex(digest: string, what: string): string {
  const hex = SHA256.exec(digest)?.[1];
  if (hex === undefined) {
    throw terminalError("UnsupportedDigest", `Cannot verify ${what}: ${JSON.stringify(digest)} is not a sha256 digest`, { context: { digest } });
  }
  return hex;
}

/** The `DigestMismatch` error for `what`, expected `digest`, actually `actual` (`sha256:<hex>`). */
export function digestMismatch(what: string, digest: string, actual: string): ImpError {
  return terminalError("DigestMismatch", `Cannot use ${what}: its bytes hash to ${actual}, not ${digest} (changed or corrupted after its digest was taken)`, {
    context: { digest, actual },
  });
}

/**
 * A pass-through that hashes everything and, at the end of its input, fails with `DigestMismatch`
 * unless the sha256 equals `digest` (so a pipeline through it rejects after the last byte).
 */
export function verifyingStream(digest: string, what: string): Transform {
  const hex = sha256Hex(digest, what);
  const hash = createHash("sha256");
  return new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      hash.update(chunk);
      done(null, chunk);
    },
    flush(done: TransformCallback) {
      const actual = hash.digest("hex");
      if (actual !== hex) {
        done(digestMismatch(what, digest, `sha256:${actual}`));
        return;
      }
      done();
    },
  });
}

/** `sha256:<hex>` of everything `source` yields. */
export async function digestOfStream(source: Readable | AsyncIterable<Buffer>): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of source) hash.update(chunk as Buffer);
  return `sha256:${hash.digest("hex")}`;
}

/** Throws `DigestMismatch` unless the file at `path` hashes to `digest`. */
export async function verifyFile(path: string, digest: string, what: string): Promise<void> {
  sha256Hex(digest, what);
  const actual = await digestOfStream(createReadStream(path));
  if (actual !== digest) throw digestMismatch(what, digest, actual);
}
