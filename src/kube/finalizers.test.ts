import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeResourceClient } from "./fake-resource-client.ts";
import { addFinalizer, hasFinalizer, removeFinalizer } from "./finalizers.ts";
import type { KubeObject, ResourceDescriptor } from "./resource.ts";

const things: ResourceDescriptor = { group: "imp.dev", version: "v1alpha1", plural: "things", kind: "Thing", namespaced: true };
const ref = { namespace: "ns", name: "t" };

describe("finalizers", () => {
  it("adds once, keeps another controller's, removes only its own, and an object gone is done", async () => {
    const client = new FakeResourceClient<KubeObject>(things);
    await client.create({ metadata: { namespace: "ns", name: "t", finalizers: ["other.io/x"] } });
    await addFinalizer(client, ref, "imp.dev/a");
    await addFinalizer(client, ref, "imp.dev/a");
    assert.deepEqual((await client.get(ref)).metadata?.finalizers, ["other.io/x", "imp.dev/a"]);
    assert.equal(hasFinalizer(await client.get(ref), "imp.dev/a"), true);
    await removeFinalizer(client, ref, "imp.dev/a");
    assert.deepEqual((await client.get(ref)).metadata?.finalizers, ["other.io/x"]);
    await client.delete(ref);
    await removeFinalizer(client, ref, "other.io/x");
    await assert.rejects(client.get(ref), "the last finalizer gone, the deleted object is gone");
    await removeFinalizer(client, ref, "other.io/x");
  });

  it("adds nothing to an object being deleted (the API server would refuse it)", async () => {
    const client = new FakeResourceClient<KubeObject>(things);
    await client.create({ metadata: { namespace: "ns", name: "t", finalizers: ["other.io/x"] } });
    await client.delete(ref);
    const stored = await addFinalizer(client, ref, "imp.dev/a");
    assert.deepEqual(stored.metadata?.finalizers, ["other.io/x"]);
    assert.equal(hasFinalizer(stored, "imp.dev/a"), false);
  });
});
