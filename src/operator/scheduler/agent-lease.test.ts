import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ImpNode } from "../../api/index.ts";
import { microTime, type Stored } from "../../kube/index.ts";
import { FakeClock } from "../../shared/index.ts";
import { agentLeaseName, isLeaseFresh, nodeOfLease } from "./agent-lease.ts";
import { RESERVATIONS_ANNOTATION } from "./reservations.ts";
import { nodeMayHaveRoom } from "./scheduler-controller.ts";

describe("agent Lease", () => {
  it("maps Lease names to nodes and ignores other Leases", () => {
    assert.equal(agentLeaseName("n1"), "imp-agent-n1");
    assert.equal(nodeOfLease({ metadata: { name: "imp-agent-n1", uid: "u" } }), "n1");
    assert.equal(nodeOfLease({ metadata: { name: "imp-operator", uid: "u" } }), undefined);
    assert.equal(nodeOfLease({ metadata: { name: "imp-agent-", uid: "u" } }), undefined);
  });

  it("is fresh until the shorter of its duration and the max age has passed on the clock", async () => {
    const clock = new FakeClock();
    const lease = { spec: { leaseDurationSeconds: 10, renewTime: microTime(clock.now()) } };
    assert.equal(isLeaseFresh(lease, clock.now()), true);
    await clock.advance(9_999);
    assert.equal(isLeaseFresh(lease, clock.now()), true);
    assert.equal(isLeaseFresh(lease, clock.now(), 5_000), false);
    await clock.advance(1);
    assert.equal(isLeaseFresh(lease, clock.now()), false);
    assert.equal(isLeaseFresh({ spec: { renewTime: microTime(clock.now()) } }, clock.now()), false, "no duration: never fresh");
    assert.equal(isLeaseFresh(undefined, clock.now()), false);
  });
});

describe("nodeMayHaveRoom", () => {
  const node = (over: { slots?: number; reserved?: number; allocated?: number; unschedulable?: boolean }): Stored<ImpNode> => ({
    apiVersion: "imp.dev/v1alpha1",
    kind: "ImpNode",
    metadata: {
      name: "n",
      uid: "u-n",
      annotations: { [RESERVATIONS_ANNOTATION]: JSON.stringify(Object.fromEntries(Array.from({ length: over.reserved ?? 0 }, (_, i) => [`u${i}`, { namespace: "ns", name: `v${i}`, vcpu: 1, memoryMiB: 1 }]))) },
    },
    spec: { unschedulable: over.unschedulable ?? false },
    status: { capacity: { vcpu: 8, memoryMiB: 8192, vmSlots: over.slots ?? 4 }, allocated: { vcpu: over.allocated ?? 0, memoryMiB: 0, vmSlots: 0 } },
  });
  it("re-queues pending VMs when capacity, cordon or the record's size could make room, not on every status write", () => {
    assert.equal(nodeMayHaveRoom(node({ reserved: 2 }), node({ reserved: 1 })), true);
    assert.equal(nodeMayHaveRoom(node({ reserved: 1 }), node({ reserved: 2 })), false);
    assert.equal(nodeMayHaveRoom(node({ slots: 4 }), node({ slots: 5 })), true);
    assert.equal(nodeMayHaveRoom(node({ unschedulable: true }), node({})), true);
    assert.equal(nodeMayHaveRoom(node({ allocated: 1 }), node({ allocated: 2 })), false);
  });
});
