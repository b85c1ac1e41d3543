import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, retryableError } from "../shared/index.ts";
import { EVENT_RESOURCE, EventRecorder, type CoreEvent } from "./event-recorder.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";

const vm = { apiVersion: "imp.dev/v1alpha1", kind: "ImpVM", metadata: { name: "vm-1", namespace: "ci", uid: "u-1" } };

function setup(cacheSize?: number) {
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const client = new FakeResourceClient<CoreEvent>(EVENT_RESOURCE);
  const recorder = new EventRecorder({ client, clock, component: "imp-operator", instance: "pod-a", ...(cacheSize === undefined ? {} : { cacheSize }) });
  return { clock, client, recorder };
}

describe("EventRecorder", () => {
  it("writes a core/v1 Event about the object", async () => {
    const { client, recorder } = setup();
    await recorder.record(vm, { type: "Normal", reason: "Scheduled", message: "Bound to node n1" });
    const { items } = await client.list({ namespace: "ci" });
    assert.equal(items.length, 1);
    const event = items[0];
    assert.equal(event?.reason, "Scheduled");
    assert.equal(event?.type, "Normal");
    assert.equal(event?.count, 1);
    assert.deepEqual(event?.involvedObject, { apiVersion: "imp.dev/v1alpha1", kind: "ImpVM", name: "vm-1", namespace: "ci", uid: "u-1" });
    assert.equal(event?.source.component, "imp-operator");
  });

  it("folds repeats into one Event with a growing count and lastTimestamp", async () => {
    const { clock, client, recorder } = setup();
    for (let i = 0; i < 5; i++) {
      await recorder.record(vm, { type: "Warning", reason: "BootFailed", message: "Guest did not answer within 30 s" });
      await clock.advance(60_000);
    }
    await recorder.record(vm, { type: "Warning", reason: "BootFailed", message: "a different message" });
    const { items } = await client.list({ namespace: "ci" });
    assert.equal(items.length, 2);
    const repeated = items.find((e) => e.message.startsWith("Guest"));
    assert.equal(repeated?.count, 5);
    assert.notEqual(repeated?.firstTimestamp, repeated?.lastTimestamp);
  });

  it("never throws when the API fails, and the next record still works", async () => {
    const { client, recorder } = setup();
    client.failNext("create", retryableError("NetworkError", "Cannot create Event: refused"));
    await recorder.record(vm, { type: "Normal", reason: "Scheduled", message: "x" });
    await recorder.record(vm, { type: "Normal", reason: "Scheduled", message: "x" });
    assert.equal((await client.list()).items.length, 1);
  });

  it("starts a new Event when the remembered one has expired", async () => {
    const { client, recorder } = setup();
    await recorder.record(vm, { type: "Normal", reason: "Scheduled", message: "x" });
    const [first] = (await client.list()).items;
    await client.delete({ namespace: "ci", name: first?.metadata?.name ?? "" });
    await recorder.record(vm, { type: "Normal", reason: "Scheduled", message: "x" });
    const { items } = await client.list();
    assert.equal(items.length, 1);
    assert.equal(items[0]?.count, 1);
  });
});
