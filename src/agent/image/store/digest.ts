/**
 * Digests are untrusted input (they come from manifests): only `sha256:<64 lowercase hex>` is accepted,
 * so a digest can be used as a file name without any path tricks.
 */
import { terminalError } from "../../../shared/index.ts";

const SHA256 = /^sha256:[0-9a-f]{64}$/;

/** True for a well-formed sha256 digest. */
export const isSha256Digest = (digest: string): boolean => SHA256.test(digest);

/** Returns the 64-hex part of a sha256 digest; throws a terminal error naming the problem otherwise. */
export function sha256Hex(digest: string): string {
  if (SHA256.test(digest)) return digest.slice("sha256:".length);
  const algorithm = digest.includes(":") ? digest.slice(0, digest.indexOf(":")) : "";
  if (algorithm !== "" && algorithm !== "sha256") {
    throw terminalError("UnsupportedDigest", `Cannot use digest ${digest.slice(0, 80)}: algorithm ${algorithm} is not supported (only sha256)`, {
      context: { digest: digest.slice(0, 200) },
    });
  }
  throw terminalError("InvalidDigest", `Cannot use digest ${JSON.stringify(digest.slice(0, 80))}: not of the form sha256:<64 lowercase hex>`, {
    context: { digest: digest.slice(0, 200) },
  });
}

/** Checks a size from a manifest: a non-negative safe integer. */
export function checkSize(size: unknown, what: string): number {
  if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) {
    throw terminalError("InvalidSize", `Cannot use ${what}: size ${String(size)} is not a non-negative integer`);
  }
  return size;
}
