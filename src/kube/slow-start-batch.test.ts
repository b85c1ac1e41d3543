import { test } from "node:test";
import assert from "node:assert/strict";
import { slowStartBatch, slowStartTimes } from "./slow-start-batch.ts";

/** Runs the calls on controllable promises and records how many were in flight together. */
function recorder(failAt: ReadonlySet<number> = new Set()) {
  let inFlight = 0;
  const batches: number[][] = [];
  let current: number[] = [];
  const call = async (i: number): Promise<void> => {
    if (inFlight === 0) batches.push((current = []));
    inFlight++;
    current.push(i);
    await new Promise<void>((resolve) => setImmediate(resolve));
    inFlight--;
    if (failAt.has(i)) throw new Error(`call ${i} refused`);
  };
  return { call, batches };
}

test("the calls go out in batches of 1, 2, 4 … up to the cap, in order", async () => {
  const { call, batches } = recorder();
  const outcome = await slowStartTimes(20, 4, call);
  assert.deepEqual(outcome, { succeeded: 20 });
  assert.deepEqual(
    batches.map((b) => b.length),
    [1, 2, 4, 4, 4, 4, 1],
  );
  assert.deepEqual(batches.flat(), Array.from({ length: 20 }, (_, i) => i));
});

test("a failed call stops after its batch; its batch's successes count and the first error is returned", async () => {
  const { call, batches } = recorder(new Set([4, 5]));
  const outcome = await slowStartTimes(20, 8, call);
  // batches [0], [1,2], [3,4,5,6]: 4 and 5 fail, nothing after 6 is called
  assert.equal(outcome.succeeded, 5);
  assert.match(String(outcome.error), /call 4 refused/);
  assert.deepEqual(batches.flat(), [0, 1, 2, 3, 4, 5, 6]);
});

test("a call refused at once is sent once, not count times", async () => {
  let calls = 0;
  const outcome = await slowStartBatch(["a", "b", "c"], 16, () => {
    calls++;
    return Promise.reject(new Error("admission webhook down"));
  });
  assert.equal(calls, 1);
  assert.equal(outcome.succeeded, 0);
  assert.match(String(outcome.error), /admission webhook down/);
});

test("nothing to do calls nothing", async () => {
  let calls = 0;
  assert.deepEqual(
    await slowStartTimes(0, 8, () => {
      calls++;
      return Promise.resolve();
    }),
    { succeeded: 0 },
  );
  assert.equal(calls, 0);
});

test("a call that throws at once fails its batch like a rejection; a cap below one is refused", async () => {
  const outcome = await slowStartTimes(3, 2, (i) => {
    if (i === 1) throw new Error("thrown, not rejected");
    return Promise.resolve();
  });
  assert.equal(outcome.succeeded, 2);
  assert.match(String(outcome.error), /thrown, not rejected/);
  await assert.rejects(slowStartTimes(3, Number.NaN, () => Promise.resolve()), RangeError);
  await assert.rejects(slowStartTimes(3, 0, () => Promise.resolve()), RangeError);
});
