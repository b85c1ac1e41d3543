import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { defaultBaseParams, planExt4 } from "./fs-params.ts";

describe("planExt4()", () => {
  const params = defaultBaseParams();

  it("sizes an empty tree to the headroom plus a floor, in whole MiB", () => {
    const plan = planExt4({ entries: 0, fileBytes: 0 }, params);
    assert.equal(plan.sizeBytes % (1024 * 1024), 0);
    assert.ok(plan.sizeBytes >= params.headroomBytes);
    assert.equal(plan.inodes, 1024);
  });

  it("leaves room for every byte and an inode per entry", () => {
    const plan = planExt4({ entries: 10_000, fileBytes: 500 * 1024 ** 2 }, params);
    assert.ok(plan.sizeBytes > 500 * 1024 ** 2 + 10_000 * 4096);
    assert.ok(plan.inodes >= 11_000);
  });

  it("grows with content", () => {
    const small = planExt4({ entries: 10, fileBytes: 1024 ** 2 }, params);
    const big = planExt4({ entries: 10, fileBytes: 1024 ** 3 }, params);
    assert.ok(big.sizeBytes > small.sizeBytes);
  });
});
