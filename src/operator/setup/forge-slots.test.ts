import assert from "node:assert/strict";
import { test } from "node:test";
import { ForgeSlots } from "./forge-slots.ts";

function slots(perKey = 2): { s: ForgeSlots; woken: string[]; clock: { t: number } } {
  const woken: string[] = [];
  const clock = { t: 0 };
  return { s: new ForgeSlots({ perKey, wake: (k) => woken.push(k), grantTtlMs: 1_000, now: () => clock.t }), woken, clock };
}

test("at most perKey writes of one credential at once; other credentials are not held back", () => {
  const { s } = slots();
  assert.equal(s.take("a", "a/1"), true);
  assert.equal(s.take("a", "a/2"), true);
  assert.equal(s.take("a", "a/3"), false, "credential a is at its two");
  assert.equal(s.take("a", "a/3"), false, "asking again keeps its place, not a second one");
  assert.equal(s.take("b", "b/1"), true, "credential b writes beside a");
  assert.equal(s.busy, 3);
});

test("first come, first served: a freed slot is handed to the oldest waiter, and nobody jumps the queue", () => {
  const { s, woken } = slots();
  s.take("a", "a/1");
  s.take("a", "a/2");
  assert.equal(s.take("a", "a/3"), false);
  assert.equal(s.take("a", "a/4"), false);
  s.release("a");
  assert.deepEqual(woken, ["a/3"], "the oldest waiter is woken, its slot kept for it");
  assert.equal(s.take("a", "a/5"), false, "a newcomer does not take the slot handed to a/3");
  assert.equal(s.take("a", "a/4"), false, "nor does the next waiter");
  assert.equal(s.take("a", "a/3"), true, "a/3 claims its grant");
  s.release("a");
  assert.deepEqual(woken, ["a/3", "a/4"]);
  assert.equal(s.take("a", "a/4"), true);
  s.release("a");
  s.release("a");
  assert.deepEqual(woken, ["a/3", "a/4", "a/5"], "then a/5, in the order they came");
});

test("a grant nobody claims in time goes to the next waiter; releases never go below zero", () => {
  const { s, woken, clock } = slots(1);
  s.take("a", "a/1");
  assert.equal(s.take("a", "a/gone"), false);
  assert.equal(s.take("a", "a/2"), false);
  s.release("a");
  assert.deepEqual(woken, ["a/gone"]);
  clock.t = 1_001;
  assert.equal(s.take("a", "a/2"), true, "the lapsed grant passed the slot on to a/2, the next in line");
  assert.deepEqual(woken, ["a/gone", "a/2"]);
  assert.equal(s.take("a", "a/gone"), false, "the lapsed one queues again if it comes back");
  s.release("a");
  assert.deepEqual(woken, ["a/gone", "a/2", "a/gone"], "and is handed the slot a/2 gives back");
  assert.equal(s.take("a", "a/gone"), true);
  s.release("a");
  s.release("a");
  assert.equal(s.busy, 0);
  assert.equal(s.take("a", "a/3"), true);
  assert.equal(s.take("a", "a/4"), false, "and the limit still holds after it");
});
