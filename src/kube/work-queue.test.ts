import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../shared/index.ts";
import { WorkQueue } from "./work-queue.ts";

const policy = { baseMs: 100, factor: 2, capMs: 1_000, jitter: 0, maxAttempts: Infinity };

/** Lets promise continuations (such as a woken `get()`) run. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

async function drainReady(queue: WorkQueue): Promise<string[]> {
  const keys: string[] = [];
  while (queue.length > 0) {
    const key = await queue.get();
    if (key === undefined) break;
    keys.push(key);
    queue.done(key);
  }
  return keys;
}

describe("WorkQueue", () => {
  describe("when a key is added several times", () => {
    it("hands it out once", async () => {
      const queue = new WorkQueue({ clock: new FakeClock(), backoff: policy });
      queue.add("ns/a");
      queue.add("ns/b");
      queue.add("ns/a");
      queue.add("ns/a");
      assert.equal(queue.length, 2);
      assert.deepEqual(await drainReady(queue), ["ns/a", "ns/b"]);
    });
  });

  describe("when a key is added while it is being processed", () => {
    it("does not hand it out again until done() and then re-queues it exactly once", async () => {
      const queue = new WorkQueue({ clock: new FakeClock(), backoff: policy });
      queue.add("ns/a");
      const first = await queue.get();
      assert.equal(first, "ns/a");
      queue.add("ns/a");
      queue.add("ns/a");
      assert.equal(queue.length, 0, "the in-flight key must not be queued a second time");

      let second: string | undefined;
      const waiting = queue.get().then((k) => (second = k));
      await settle();
      assert.equal(second, undefined, "a second worker must not get the key that is in flight");

      queue.done("ns/a");
      await waiting;
      assert.equal(second, "ns/a");
      queue.done("ns/a");
      assert.equal(queue.length, 0);
      assert.equal(queue.processingCount, 0);
    });

    it("keeps two workers on different keys", async () => {
      const queue = new WorkQueue({ clock: new FakeClock(), backoff: policy });
      queue.add("a");
      queue.add("b");
      assert.deepEqual([await queue.get(), await queue.get()], ["a", "b"]);
      assert.equal(queue.processingCount, 2);
    });
  });

  describe("when keys fail", () => {
    it("addRateLimited() delays them exponentially up to the cap", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      const delays: number[] = [];
      for (let failure = 1; failure <= 6; failure++) {
        const started = clock.now();
        queue.addRateLimited("k");
        // Step 10 ms at a time until the key becomes ready.
        while (queue.length === 0) await clock.advance(10);
        delays.push(clock.now() - started);
        assert.equal(await queue.get(), "k");
        queue.done("k");
      }
      assert.deepEqual(delays, [100, 200, 400, 800, 1_000, 1_000]);
      assert.equal(queue.numRequeues("k"), 6);
    });

    it("forget() resets the backoff to the base delay", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      queue.addRateLimited("k");
      queue.addRateLimited("k");
      queue.addRateLimited("k");
      assert.equal(queue.numRequeues("k"), 3);
      queue.forget("k");
      assert.equal(queue.numRequeues("k"), 0);
      await clock.advance(100);
      assert.equal(queue.length, 1, "the first failure's 100 ms delay has passed");
      await drainReady(queue);
      queue.addRateLimited("k");
      await clock.advance(99);
      assert.equal(queue.length, 0);
      await clock.advance(1);
      assert.equal(queue.length, 1, "after forget() the next failure waits the base delay again");
    });

    it("keeps backoff per key", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      for (let i = 0; i < 2; i++) {
        queue.addRateLimited("slow");
        await clock.advance(1_000);
        await drainReady(queue);
      }
      queue.addRateLimited("slow"); // third failure: 400 ms
      queue.addRateLimited("fresh"); // first failure: 100 ms
      await clock.advance(100);
      assert.deepEqual(await drainReady(queue), ["fresh"]);
      await clock.advance(300);
      assert.deepEqual(await drainReady(queue), ["slow"]);
    });
  });

  describe("when many keys fail at once", () => {
    /** Keys that became ready after each `stepMs` of fake time, until `untilMs`. */
    async function readyOverTime(clock: FakeClock, queue: WorkQueue, stepMs: number, untilMs: number): Promise<number[]> {
      const counts: number[] = [];
      for (let t = stepMs; t <= untilMs; t += stepMs) {
        await clock.advance(stepMs);
        counts.push((await drainReady(queue)).length);
      }
      return counts;
    }

    it("retries the burst after their backoff, then one key per 1/qps (default 10 qps, burst 100)", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      for (let i = 0; i < 130; i++) queue.addRateLimited(`ns/k${i}`);
      // t=100 ms: the 100-token burst plus the 101st key, whose token was due at 100 ms.
      const counts = await readyOverTime(clock, queue, 100, 3_000);
      assert.equal(counts[0], 101);
      assert.deepEqual(counts.slice(1, 29), Array.from({ length: 28 }, () => 1));
      assert.equal(counts.reduce((a, b) => a + b, 0), 130);
      assert.equal(clock.pendingSleeps, 0);
    });

    it("waits the larger of the key's backoff and the shared bucket", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy, rateLimit: { qps: 2, burst: 1 } });
      queue.addRateLimited("first"); // backoff 100 ms, token at once → 100 ms
      queue.addRateLimited("second"); // backoff 100 ms, token in 500 ms → 500 ms
      await clock.advance(100);
      assert.deepEqual(await drainReady(queue), ["first"]);
      await clock.advance(399);
      assert.deepEqual(await drainReady(queue), []);
      await clock.advance(1);
      assert.deepEqual(await drainReady(queue), ["second"]);

    });

    it("does not rate-limit add() and addAfter()", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy, rateLimit: { qps: 1, burst: 1 } });
      for (let i = 0; i < 5; i++) queue.add(`a${i}`);
      for (let i = 0; i < 5; i++) queue.addAfter(`b${i}`, 10);
      await clock.advance(10);
      assert.equal((await drainReady(queue)).length, 10);
    });
  });

  describe("addAfter()", () => {
    it("queues the key when the clock reaches the delay, not before", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      queue.addAfter("k", 5_000);
      await clock.advance(4_999);
      assert.equal(queue.length, 0);
      assert.equal(queue.delayedCount, 1);
      await clock.advance(1);
      assert.equal(queue.length, 1);
      assert.equal(queue.delayedCount, 0);
    });

    it("keeps the earliest of several pending delays and adds the key once", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      queue.addAfter("k", 5_000);
      queue.addAfter("k", 1_000);
      queue.addAfter("k", 3_000);
      await clock.advance(1_000);
      assert.deepEqual(await drainReady(queue), ["k"]);
      await clock.advance(10_000);
      assert.equal(queue.length, 0, "the superseded 5 s timer must not add the key again");
    });

    it("adds at once for a zero delay", () => {
      const queue = new WorkQueue({ clock: new FakeClock(), backoff: policy });
      queue.addAfter("k", 0);
      assert.equal(queue.length, 1);
    });
  });

  describe("when shut down", () => {
    it("wakes waiting workers with undefined and ignores later adds", async () => {
      const clock = new FakeClock();
      const queue = new WorkQueue({ clock, backoff: policy });
      const waiting = queue.get();
      queue.addAfter("later", 1_000);
      queue.shutDown();
      assert.equal(await waiting, undefined);
      queue.add("x");
      await clock.advance(2_000);
      assert.equal(queue.length, 0);
      assert.equal(await queue.get(), undefined);
    });

    it("shutDownWithDrain() resolves only after in-flight keys are done", async () => {
      const queue = new WorkQueue({ clock: new FakeClock(), backoff: policy });
      queue.add("a");
      queue.add("b");
      const key = await queue.get();
      assert.equal(key, "a");
      let drained = false;
      const draining = queue.shutDownWithDrain().then(() => (drained = true));
      await settle();
      assert.equal(drained, false);
      assert.equal(queue.length, 0, "queued keys that were not started are dropped");
      queue.done("a");
      await draining;
      assert.equal(drained, true);
    });
  });
});
