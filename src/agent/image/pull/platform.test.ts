import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { IndexEntry } from "./media-types.ts";
import { selectPlatform } from "./platform.ts";

const entry = (n: number, os: string, architecture: string, variant?: string): IndexEntry => ({
  mediaType: "application/vnd.oci.image.manifest.v1+json",
  digest: `sha256:${String(n).repeat(64).slice(0, 64)}`,
  size: 100,
  platform: { os, architecture, ...(variant === undefined ? {} : { variant }) },
});

describe("selectPlatform", () => {
  const index = [entry(1, "linux", "arm", "v6"), entry(2, "linux", "arm", "v7"), entry(3, "linux", "arm64", "v8"), entry(4, "linux", "amd64"), entry(5, "unknown", "unknown")];
  const cases: [string, { os: string; architecture: string; variant?: string }, number][] = [
    ["amd64", { os: "linux", architecture: "amd64" }, 4],
    ["arm64 without variant takes v8", { os: "linux", architecture: "arm64" }, 3],
    ["arm v7 exact", { os: "linux", architecture: "arm", variant: "v7" }, 2],
    ["arm without variant takes the first arm", { os: "linux", architecture: "arm" }, 1],
  ];
  for (const [name, wanted, n] of cases) {
    it(name, () => assert.equal(selectPlatform(index, wanted, "img").digest, index[n - 1]?.digest));
  }
  it("arm64/v8 accepts an arm64 entry without variant", () => {
    assert.equal(selectPlatform([entry(7, "linux", "arm64")], { os: "linux", architecture: "arm64", variant: "v8" }, "img").digest, entry(7, "linux", "arm64").digest);
  });
  it("lists the offered platforms (not attestation entries) when none matches", () => {
    assert.throws(() => selectPlatform(index, { os: "linux", architecture: "riscv64" }, "reg/x:1"), {
      message: "Cannot pull reg/x:1: the index has no image for platform linux/riscv64; it offers linux/arm/v6, linux/arm/v7, linux/arm64/v8, linux/amd64",
    });
  });
  it("says when an index offers no platforms at all", () => {
    assert.throws(() => selectPlatform([], { os: "linux", architecture: "amd64" }, "x"), /offers no platforms/);
  });
});
