import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { defaultBaseParams } from "../ext4/index.ts";
import { baseImageKey, uuidOfKey } from "./cache-key.ts";

const d = (c: string): string => `sha256:${c.repeat(64)}`;
const input = { layerDigests: [d("1"), d("2")], guestAgentDigest: d("9"), params: defaultBaseParams() };

describe("baseImageKey()", () => {
  it("is a stable 64-hex key", () => {
    assert.match(baseImageKey(input), /^[0-9a-f]{64}$/);
    assert.equal(baseImageKey(input), baseImageKey({ ...input }));
  });

  it("changes with every input that changes the filesystem", () => {
    const base = baseImageKey(input);
    const variants = [
      { ...input, layerDigests: [d("2"), d("1")] },
      { ...input, layerDigests: [d("1"), d("2"), d("3")] },
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
    assert.throws(() => baseImageKey({ ...input, layerDigests: ["md5:abc"] }), /not a sha256 digest/);
  });
});

describe("uuidOfKey()", () => {
  it("derives an RFC 4122-shaped UUID", () => assert.match(uuidOfKey("f".repeat(64)), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}$/));
});
