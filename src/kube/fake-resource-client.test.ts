import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, ImpError } from "../shared/index.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";
import type { ResourceDescriptor } from "./resource.ts";
// The same cases the integration test runs against a real API server (where they are proven to
// hold); here they keep the fake honest in the fast unit suite.
import { PARITY_CASES, type Widget } from "../../test/integration/kube/fake-parity.cases.ts";

const WIDGETS: ResourceDescriptor = { group: "parity.imp.dev", version: "v1", plural: "widgets", kind: "Widget", namespaced: true };
const fake = (options = {}) => new FakeResourceClient<Widget>(WIDGETS, { fields: { "status.nodeName": (w) => w.status?.nodeName }, ...options });

describe("FakeResourceClient (the API-server parity cases)", () => {
  for (const c of PARITY_CASES) {
    it(c.name, async () => {
      assert.deepEqual(await c.run({ client: fake(), namespace: "ns" }), c.expected);
    });
  }
});

describe("FakeResourceClient", () => {
  it("takes timestamps from the injected clock and generated names from the injected random source", async () => {
    const clock = new FakeClock(Date.UTC(2026, 0, 2, 3, 4, 5, 678));
    const client = fake({ clock, random: () => 0 });
    const created = await client.create({ metadata: { generateName: "vm-", namespace: "ns", finalizers: ["imp.dev/cleanup"] } });
    assert.equal(created.metadata?.name, "vm-bbbbb");
    assert.equal(created.metadata?.creationTimestamp, "2026-01-02T03:04:05Z");
    // A random source stuck on one name clashes on every retry: the API server then answers AlreadyExists.
    await assert.rejects(client.create({ metadata: { generateName: "vm-", namespace: "ns" } }), (err: unknown) => err instanceof ImpError && err.code === "AlreadyExists");
    let draws = 0;
    const unlucky = fake({ random: () => (draws++ < 5 ? 0 : 0.5) });
    await unlucky.create({ metadata: { name: "vm-bbbbb", namespace: "ns" } });
    assert.equal((await unlucky.create({ metadata: { generateName: "vm-", namespace: "ns" } })).metadata?.name, "vm-rrrrr", "one clash is retried");
    await clock.advance(60_000);
    await client.delete({ namespace: "ns", name: "vm-bbbbb" });
    assert.equal((await client.get({ namespace: "ns", name: "vm-bbbbb" })).metadata?.deletionTimestamp, "2026-01-02T03:05:05Z");
  });
});
