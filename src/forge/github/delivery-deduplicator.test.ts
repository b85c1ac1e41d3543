import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../shared/index.ts";
import { DeliveryDeduplicator } from "./delivery-deduplicator.ts";

test("a delivery id is new once, a repeat within the TTL is not", () => {
  const clock = new FakeClock();
  const dedup = new DeliveryDeduplicator(clock, { ttlMs: 1000 });
  assert.equal(dedup.firstDelivery("a"), true);
  assert.equal(dedup.firstDelivery("a"), false);
  assert.equal(dedup.firstDelivery("b"), true);
});

test("ids are forgotten after the TTL", async () => {
  const clock = new FakeClock();
  const dedup = new DeliveryDeduplicator(clock, { ttlMs: 1000 });
  dedup.firstDelivery("a");
  await clock.advance(999);
  assert.equal(dedup.firstDelivery("a"), false);
  await clock.advance(1);
  assert.equal(dedup.firstDelivery("a"), true);
});

test("memory is bounded: the oldest ids go first", () => {
  const dedup = new DeliveryDeduplicator(new FakeClock(), { maxEntries: 3 });
  for (const id of ["1", "2", "3", "4"]) assert.equal(dedup.firstDelivery(id), true);
  assert.equal(dedup.size, 3);
  assert.equal(dedup.firstDelivery("4"), false);
  assert.equal(dedup.firstDelivery("1"), true, "the oldest was evicted");
});
