import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, ImpError } from "../shared/index.ts";
import { DEFAULT_QUEUE_RATE_LIMIT, TokenBucket } from "./token-bucket.ts";

describe("TokenBucket", () => {
  it("defaults to client-go's controller limit: 10 qps, burst 100", () => {
    assert.deepEqual(DEFAULT_QUEUE_RATE_LIMIT, { qps: 10, burst: 100 });
  });

  it("hands out the burst at once, then spaces reservations 1/qps apart", () => {
    const bucket = new TokenBucket({ qps: 10, burst: 3 }, new FakeClock());
    assert.deepEqual(
      Array.from({ length: 6 }, () => bucket.reserve()),
      [0, 0, 0, 100, 200, 300],
    );
    assert.equal(bucket.available(), -3);
  });

  it("refills at qps on the injected clock, never above the burst", async () => {
    const clock = new FakeClock();
    const bucket = new TokenBucket({ qps: 10, burst: 3 }, clock);
    for (let i = 0; i < 5; i++) bucket.reserve();
    await clock.advance(200);
    assert.equal(bucket.available(), 0, "the two reservations in the future are now paid for");
    assert.equal(bucket.reserve(), 100);
    await clock.advance(60_000);
    assert.equal(bucket.available(), 3);
    assert.deepEqual([bucket.reserve(), bucket.reserve(), bucket.reserve(), bucket.reserve()], [0, 0, 0, 100]);
  });

  it("never waits for an infinite rate", () => {
    const bucket = new TokenBucket({ qps: Infinity, burst: 1 }, new FakeClock());
    assert.deepEqual([bucket.reserve(), bucket.reserve(), bucket.reserve()], [0, 0, 0]);
  });

  it("rejects a rate that could never hand out a token", () => {
    for (const limit of [{ qps: 0, burst: 10 }, { qps: 10, burst: 0 }, { qps: Number.NaN, burst: 1 }]) {
      assert.throws(() => new TokenBucket(limit, new FakeClock()), (err: unknown) => err instanceof ImpError && err.code === "InvalidRateLimit");
    }
  });
});
