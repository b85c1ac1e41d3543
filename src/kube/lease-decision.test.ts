import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { decideLease, microTime, observeLease, type LeaseObservation } from "./lease-decision.ts";

const now = 1_000_000;
const held = (holder: string, observedAt: number, leaseDurationSeconds = 15): LeaseObservation => ({
  resourceVersion: "7",
  spec: { holderIdentity: holder, leaseDurationSeconds, leaseTransitions: 2, acquireTime: microTime(0), renewTime: microTime(0) },
  observedAt,
});

describe("decideLease()", () => {
  it("creates the lease when there is none", () => {
    const action = decideLease({ observed: undefined, identity: "me", now, leaseDurationMs: 15_000 });
    assert.equal(action.kind, "create");
    assert.equal(action.kind === "create" && action.spec.holderIdentity, "me");
  });

  it("renews its own lease keeping acquireTime and transitions", () => {
    const action = decideLease({ observed: held("me", now - 60_000), identity: "me", now, leaseDurationMs: 15_000 });
    assert.equal(action.kind, "renew");
    if (action.kind !== "renew") return;
    assert.equal(action.resourceVersion, "7");
    assert.equal(action.spec.leaseTransitions, 2);
    assert.equal(action.spec.acquireTime, microTime(0));
    assert.equal(action.spec.renewTime, microTime(now));
  });

  it("waits while another holder's lease has not been unchanged for a lease duration", () => {
    const action = decideLease({ observed: held("other", now - 14_999), identity: "me", now, leaseDurationMs: 15_000 });
    assert.deepEqual(action, { kind: "wait", holder: "other", expiresAt: now + 1 });
  });

  it("takes over an expired lease and counts a transition", () => {
    const action = decideLease({ observed: held("other", now - 15_000), identity: "me", now, leaseDurationMs: 15_000 });
    assert.equal(action.kind, "acquire");
    assert.equal(action.kind === "acquire" && action.spec.leaseTransitions, 3);
  });

  it("uses the holder's lease duration, not its own", () => {
    const action = decideLease({ observed: held("other", now - 20_000, 30), identity: "me", now, leaseDurationMs: 15_000 });
    assert.equal(action.kind, "wait");
  });

  it("takes a released lease (empty holder) at once", () => {
    const action = decideLease({ observed: held("", now), identity: "me", now, leaseDurationMs: 15_000 });
    assert.equal(action.kind, "acquire");
  });
});

describe("observeLease()", () => {
  it("keeps the first observation time while the version is unchanged and restarts it on change", () => {
    const first = observeLease(undefined, { lease: { metadata: { resourceVersion: "1" }, spec: { holderIdentity: "a" } }, now: 100 });
    const same = observeLease(first, { lease: { metadata: { resourceVersion: "1" }, spec: { holderIdentity: "a" } }, now: 500 });
    assert.equal(same.observedAt, 100);
    const changed = observeLease(same, { lease: { metadata: { resourceVersion: "2" }, spec: { holderIdentity: "a" } }, now: 900 });
    assert.equal(changed.observedAt, 900);
  });
});

describe("microTime()", () => {
  it("formats with six fractional digits", () => {
    assert.equal(microTime(Date.UTC(2026, 0, 2, 3, 4, 5, 678)), "2026-01-02T03:04:05.678000Z");
  });
});
