import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { mapBounded } from "./pool.ts";
import { ImpError } from "../../../shared/index.ts";

describe("mapBounded", () => {
  it("keeps order and never exceeds the limit", async () => {
    let inFlight = 0;
    let max = 0;
    const out = await mapBounded([1, 2, 3, 4, 5, 6, 7], 3, async (n) => {
      inFlight++;
      max = Math.max(max, inFlight);
      await new Promise((r) => setImmediate(r));
      inFlight--;
      return n * 2;
    });
    assert.deepEqual(out, [2, 4, 6, 8, 10, 12, 14]);
    assert.equal(max, 3);
  });
  it("stops starting work after the first failure, aborts the others, and throws that failure", async () => {
    const started: number[] = [];
    let abortedSeen = false;
    await assert.rejects(
      mapBounded([1, 2, 3, 4, 5], 2, async (n, signal) => {
        started.push(n);
        if (n === 1) throw new Error("boom");
        await new Promise((r) => setImmediate(r));
        abortedSeen ||= signal.aborted;
        return n;
      }),
      /boom/,
    );
    assert.deepEqual(started, [1, 2]);
    assert.equal(abortedSeen, true);
  });
  it("rejects a non-positive limit", async () => {
    await assert.rejects(mapBounded([1], 0, async (n) => n), (err: unknown) => err instanceof ImpError && err.code === "PullConfigInvalid");
  });
});
