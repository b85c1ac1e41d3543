import assert from "node:assert/strict";
import { test } from "node:test";
import { ForgeSlots } from "./forge-slots.ts";

test("at most perPool forge writes of one pool at once; other pools are not held back; a freed slot wakes the oldest waiter", () => {
  const woken: string[] = [];
  const slots = new ForgeSlots(2, (key) => woken.push(key));
  assert.equal(slots.take("a", "a/1"), true);
  assert.equal(slots.take("a", "a/2"), true);
  assert.equal(slots.take("a", "a/3"), false, "pool a is at its two");
  assert.equal(slots.take("a", "a/4"), false);
  assert.equal(slots.take("a", "a/3"), false, "asking again keeps its place, not a second one");
  assert.equal(slots.take("b", "b/1"), true, "pool b mints beside a");
  assert.equal(slots.minting, 3);
  slots.release("a");
  assert.deepEqual(woken, ["a/3"], "the oldest waiter is woken");
  assert.equal(slots.take("a", "a/3"), true);
  assert.equal(slots.take("a", "a/5"), false);
  slots.release("a");
  slots.release("a");
  assert.deepEqual(woken, ["a/3", "a/4", "a/5"]);
  slots.release("b");
  assert.equal(slots.minting, 0);
  slots.release("a");
  assert.equal(slots.minting, 0, "a release too many never goes below zero");
  assert.equal(slots.take("a", "a/6"), true);
  assert.equal(slots.take("a", "a/7"), true);
  assert.equal(slots.take("a", "a/8"), false, "and the limit still holds after it");
});
