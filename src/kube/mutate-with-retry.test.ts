import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError, conflictError, systemClock } from "../shared/index.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";
import { mutateWithRetry } from "./mutate-with-retry.ts";
import type { KubeObject, ResourceDescriptor } from "./resource.ts";

type Thing = KubeObject & { spec?: { size?: number }; status?: { items?: string[]; phase?: string } };
const things: ResourceDescriptor = { group: "imp.dev", version: "v1alpha1", plural: "things", kind: "Thing", namespaced: true };
const ref = { namespace: "ns", name: "t" };
const fastPolicy = { baseMs: 1, factor: 2, capMs: 5, jitter: 1, maxAttempts: 10 };

async function setup(): Promise<FakeResourceClient<Thing>> {
  const client = new FakeResourceClient<Thing>(things);
  await client.create({ metadata: { namespace: "ns", name: "t" }, spec: { size: 1 }, status: { items: [] } });
  return client;
}

describe("mutateWithRetry()", () => {
  it("loses no update when ten writers race on one list", async () => {
    const client = await setup();
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        mutateWithRetry(client, {
          ref,
          mutate: (draft) => {
            draft.status = { ...draft.status, items: [...(draft.status?.items ?? []), `w${i}`] };
          },
          subresource: "status",
          policy: fastPolicy,
          clock: systemClock,
        }),
      ),
    );
    const final = await client.get(ref);
    assert.deepEqual([...(final.status?.items ?? [])].sort(), Array.from({ length: 10 }, (_, i) => `w${i}`).sort());
    assert.ok(client.calls.patchStatus > 10, "some writes conflicted and were retried");
  });

  it("writes only the status part through the status subresource", async () => {
    const client = await setup();
    await mutateWithRetry(client, {
      ref,
      mutate: (draft) => {
        draft.status = { ...draft.status, phase: "Running" };
        draft.spec = { size: 99 }; // not part of a status write
      },
      subresource: "status",
    });
    const final = await client.get(ref);
    assert.equal(final.status?.phase, "Running");
    assert.equal(final.spec?.size, 1);
    assert.equal(client.calls.patch, 0);
  });

  it("skips the write when nothing changed or mutate returns false", async () => {
    const client = await setup();
    await mutateWithRetry(client, { ref, mutate: () => undefined });
    await mutateWithRetry(client, {
      ref,
      mutate: (draft) => {
        draft.spec = { size: 5 };
        return false;
      },
    });
    assert.equal(client.calls.patch + client.calls.patchStatus, 0);
  });

  it("throws the conflict after the policy's attempts", async () => {
    const client = await setup();
    for (let i = 0; i < 3; i++) client.failNext("patch", conflictError("Conflict", "Cannot patch Thing ns/t: modified"));
    await assert.rejects(
      mutateWithRetry(client, { ref, mutate: (draft) => void (draft.spec = { size: 2 }), policy: { ...fastPolicy, maxAttempts: 3 } }),
      (err: unknown) => err instanceof ImpError && err.errorClass === "conflict",
    );
    assert.equal((await client.get(ref)).spec?.size, 1);
  });
});
