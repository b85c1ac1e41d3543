import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { defaultBaseParams, mkfsIdentity } from "../ext4/index.ts";
import { baseImageKey, uuidOfKey } from "./cache-key.ts";

const d = (c: string): string => `sha256:${c.repeat(64)}`;
const GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";
const ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd";
const layer = (c: string, mediaType = GZIP): { digest: string; mediaType: string } => ({ digest: d(c), mediaType });
const input = { layers: [layer("1"), layer("2")], guestAgentDigest: d("9"), params: defaultBaseParams(), mkfs: "mke2fs 1.47.0 (5-Feb-2023); conf sha256:00" };

describe("baseImageKey()", () => {
  it("is a stable 64-hex key", () => {
    assert.match(baseImageKey(input), /^[0-9a-f]{64}$/);
    assert.equal(baseImageKey(input), baseImageKey({ ...input }));
  });

  it("changes with every input that changes the filesystem", () => {
    const base = baseImageKey(input);
    const variants = [
      { ...input, layers: [layer("2"), layer("1")] },
      { ...input, layers: [layer("1"), layer("2"), layer("3")] },
      { ...input, layers: [layer("1"), layer("2", ZSTD)] },
      { ...input, layers: [layer("1", "application/vnd.docker.image.rootfs.diff.tar.gzip"), layer("2")] },
      { ...input, mkfs: "mke2fs 1.47.1 (20-May-2024); conf sha256:00" },
      { ...input, mkfs: "mke2fs 1.47.0 (5-Feb-2023); conf sha256:01" },
      { ...input, guestAgentDigest: d("8") },
      { ...input, params: { ...input.params, journal: true } },
      { ...input, params: { ...input.params, inodeSize: 128 as const } },
      { ...input, params: { ...input.params, headroomBytes: 1 } },
      { ...input, formatVersion: "imp-ext4-999" },
    ];
    const keys = new Set(variants.map(baseImageKey));
    assert.equal(keys.size, variants.length);
    assert.equal(keys.has(base), false);
  });

  it("refuses digests that are not sha256", () => {
    assert.throws(() => baseImageKey({ ...input, layers: [{ digest: "md5:abc", mediaType: GZIP }] }), /not a sha256 digest/);
  });

  it("changes with a layer's media type alone (same digest, another compression)", () => {
    assert.notEqual(baseImageKey({ ...input, layers: [layer("1", GZIP)] }), baseImageKey({ ...input, layers: [layer("1", ZSTD)] }));
  });
});

describe("mkfsIdentity()", () => {
  it("names the e2fsprogs version and the hash of the config we run mkfs with", async () => {
    assert.match(await mkfsIdentity(), /^mke2fs \d+\.\d+(\.\d+)? .*; conf sha256:[0-9a-f]{64}$/);
  });
});

describe("uuidOfKey()", () => {
  it("derives an RFC 4122-shaped UUID", () => assert.match(uuidOfKey("f".repeat(64)), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}$/));
});
