import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stagingCapBytes } from "./limits.ts";

describe("stagingCapBytes()", () => {
  it("is the free space less the reserve", () => assert.equal(stagingCapBytes(10_000, 1_000, false), 9_000));
  it("is halved when the ext4 file goes to the same filesystem", () => assert.equal(stagingCapBytes(10_000, 1_000, true), 4_500));
  it("is never negative", () => assert.equal(stagingCapBytes(1_000, 10_000, true), 0));
});
