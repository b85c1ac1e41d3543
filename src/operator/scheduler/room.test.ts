import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ImpNode } from "../../api/index.ts";
import { microTime, type Lease, type Stored } from "../../kube/index.ts";
import { FakeClock } from "../../shared/index.ts";
import { decidePlacement, type BoundVm } from "./decide-placement.ts";
import { RESERVATIONS_ANNOTATION, serializeReservations } from "./reservations.ts";
import { copiesThatFit, nodeRooms, placeWaiting, roomFor, type RoomInput, type WaitingVm } from "./room.ts";
import type { VmRequest } from "./vm-request.ts";

const clock = new FakeClock();
const request: VmRequest = { vcpu: 2, memoryMiB: 1024, vmSlots: 1, arch: "amd64", kernel: "default", needsSetupKey: false };

function node(name: string, cap: [number, number, number] = [8, 8192, 4], over: { unschedulable?: boolean; reservations?: string; arch?: "amd64" | "arm64" } = {}): Stored<ImpNode> {
  const [vcpu, memoryMiB, vmSlots] = cap;
  return {
    apiVersion: "imp.dev/v1alpha1",
    kind: "ImpNode",
    metadata: { name, uid: `uid-${name}`, ...(over.reservations === undefined ? {} : { annotations: { [RESERVATIONS_ANNOTATION]: over.reservations } }) },
    spec: { unschedulable: over.unschedulable ?? false },
    status: { capacity: { vcpu, memoryMiB, vmSlots }, arch: over.arch ?? "amd64" },
  };
}
const lease = (renewedAgoMs: number): Lease => ({ spec: { holderIdentity: "n", leaseDurationSeconds: 40, renewTime: microTime(clock.now() - renewedAgoMs) } });
const bound = (uid: string, vcpu: number, phase: BoundVm["phase"] = "Running"): BoundVm => ({ uid, phase, resources: { vcpu, memoryMiB: 1024, vmSlots: 1 } });
const w = (request: VmRequest, uid: string): WaitingVm => ({ request, uid });
const input = (nodes: Stored<ImpNode>[], over: Partial<RoomInput> = {}): RoomInput => ({ nodes, leases: new Map(nodes.map((n) => [n.metadata.name, lease(1_000)])), bound: new Map(), nowMs: clock.now(), ...over });

describe("roomFor: how many more VMs of a request the cluster can place now", () => {
  it("takes the tightest dimension of each node and sums the nodes", () => {
    assert.equal(copiesThatFit(request, { vcpu: 8, memoryMiB: 8192, vmSlots: 4 }, { vcpu: 0, memoryMiB: 0, vmSlots: 0 }), 4, "slots bind");
    assert.equal(copiesThatFit(request, { vcpu: 5, memoryMiB: 8192, vmSlots: 8 }, { vcpu: 0, memoryMiB: 0, vmSlots: 0 }), 2, "vCPU binds");
    assert.equal(copiesThatFit(request, { vcpu: 8, memoryMiB: 2047, vmSlots: 8 }, { vcpu: 0, memoryMiB: 0, vmSlots: 0 }), 1, "memory binds");
    assert.equal(copiesThatFit(request, { vcpu: 8, memoryMiB: 8192, vmSlots: 4 }, { vcpu: 9, memoryMiB: 0, vmSlots: 0 }), 0, "overcommitted is no room, not negative");
    assert.equal(roomFor(request, input([node("a"), node("b", [4, 8192, 8])])), 4 + 2);
  });

  it("counts bound VMs and reservations, and not VMs that ended", () => {
    const bound1 = new Map([["a", [bound("x", 2), bound("y", 2, "Succeeded")]]]);
    assert.equal(roomFor(request, input([node("a")], { bound: bound1 })), 3);
    const reservations = serializeReservations({ r1: { namespace: "d", name: "v1", vcpu: 2, memoryMiB: 1024 }, r2: { namespace: "d", name: "v2", vcpu: 2, memoryMiB: 1024 } });
    assert.equal(roomFor(request, input([node("a", [8, 8192, 4], { reservations })])), 2);
  });

  it("a node the scheduler would refuse has no room: cordoned, its Node deleted or cordoned, a stale or missing Lease, another arch", () => {
    const nodes = [node("a", undefined, { unschedulable: true }), node("b"), node("c"), node("d"), node("e", undefined, { arch: "arm64" }), node("f")];
    const leases = new Map(nodes.map((n) => [n.metadata.name, lease(1_000)]));
    leases.set("d", lease(41_000));
    leases.delete("f");
    assert.equal(roomFor(request, input(nodes, { leases, deletedKubeNodes: new Set(["b"]), cordonedKubeNodes: new Set(["c"]) })), 0);
  });

  it("agrees with decidePlacement: a node with room 0 is never chosen, a node with room ≥ 1 can be", () => {
    for (const used of [0, 1, 2, 3, 4]) {
      const nodes = [node("a", [8, 8192, 4])];
      const b = new Map([["a", Array.from({ length: used }, (_, i) => bound(`u${i}`, 2))]]);
      const room = roomFor(request, input(nodes, { bound: b }));
      assert.equal(room, 4 - used);
      assert.equal(decidePlacement({ ...input(nodes, { bound: b }), vmUid: "new", pinnedNode: undefined, request }).kind, room > 0 ? "bind" : "unschedulable");
    }
  });

  it("VMs already waiting take their room first, by resources, and only where a node would take them", () => {
    const nodes = [node("a", [8, 8192, 8]), node("b", [8, 8192, 8])];
    assert.equal(roomFor(request, input(nodes)), 8);
    const big: VmRequest = { ...request, vcpu: 8 };
    assert.equal(roomFor(request, input(nodes), [w(big, "w1")]), 4, "one waiting 8-vCPU VM fills a node: 4 of ours fewer, not 1");
    const half: VmRequest = { ...request, vcpu: 4 };
    assert.equal(roomFor(big, input(nodes), [w(half, "w1"), w(half, "w2")]), 0, "two 4-vCPU VMs go where the scheduler puts them, one per node (spread), leaving no node for an 8");
    const arm: VmRequest = { ...request, arch: "arm64" };
    const huge: VmRequest = { ...request, vcpu: 64 };
    assert.equal(roomFor(request, input(nodes), [w(arm, "w1"), w(huge, "w2")]), 8, "waiting VMs no node would take (another arch, too big) take nothing");
    assert.equal(roomFor(request, input(nodes), [w(request, "w1"), w(request, "w2"), w(request, "w3")]), 5, "three of our size take three");
  });

  it("a waiting VM is counted on the node the scheduler will bind it to, also among nodes about equally empty", () => {
    // Three big nodes, each a VM or two apart: all within the spread tolerance, so the uid decides.
    const nodes = [node("a", [40, 40960, 40]), node("b", [40, 40960, 40]), node("c", [40, 40960, 40])];
    const b = new Map([["a", [bound("x", 1)]], ["b", [bound("y", 2), bound("z", 1)]]]);
    const picked = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const uid = `vm-${i}`;
      const placement = decidePlacement({ ...input(nodes, { bound: b }), vmUid: uid, pinnedNode: undefined, request });
      const [counted] = placeWaiting(nodeRooms(input(nodes, { bound: b })), [w(request, uid)]);
      assert.equal(placement.kind === "bind" ? placement.nodeName : undefined, counted, uid);
      if (counted !== undefined) picked.add(counted);
    }
    assert.deepEqual([...picked].sort(), ["a", "b", "c"], "the uids spread over all three");
  });
});
