import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ImpNode } from "../../api/index.ts";
import { microTime, type Lease, type Stored } from "../../kube/index.ts";
import { FakeClock } from "../../shared/index.ts";
import { decidePlacement, nodeUsage, type BoundVm, type PlacementInput } from "./decide-placement.ts";
import { RESERVATIONS_ANNOTATION, serializeReservations } from "./reservations.ts";
import type { VmRequest } from "./vm-request.ts";

const clock = new FakeClock();
const request: VmRequest = { vcpu: 2, memoryMiB: 1024, vmSlots: 1, arch: "amd64", kernel: "default", needsSetupKey: false };

function node(name: string, over: { cap?: [number, number, number]; unschedulable?: boolean; arch?: "amd64" | "arm64"; kernels?: string[]; reservations?: string; setupKey?: boolean } = {}): Stored<ImpNode> {
  const [vcpu, memoryMiB, vmSlots] = over.cap ?? [8, 8192, 4];
  return {
    apiVersion: "imp.dev/v1alpha1",
    kind: "ImpNode",
    metadata: { name, uid: `uid-${name}`, ...(over.reservations === undefined ? {} : { annotations: { [RESERVATIONS_ANNOTATION]: over.reservations } }) },
    spec: { unschedulable: over.unschedulable ?? false },
    status: {
      capacity: { vcpu, memoryMiB, vmSlots },
      arch: over.arch ?? "amd64",
      ...(over.kernels === undefined ? {} : { kernels: over.kernels }),
      ...(over.setupKey === true ? { setupKey: { algorithm: "x", keyId: "0123456789abcdef", publicKey: "A".repeat(44) } } : {}),
    },
  };
}
const lease = (renewedAgoMs: number, durationS = 40): Lease => ({ spec: { holderIdentity: "n", leaseDurationSeconds: durationS, renewTime: microTime(clock.now() - renewedAgoMs) } });
const bound = (uid: string, vcpu: number, phase: BoundVm["phase"] = "Running"): BoundVm => ({ uid, phase, resources: { vcpu, memoryMiB: 1024, vmSlots: 1 } });

function input(nodes: Stored<ImpNode>[], over: Partial<PlacementInput> = {}): PlacementInput {
  const leases = new Map(nodes.map((n) => [n.metadata.name, lease(1_000)]));
  return { vmUid: "vm-uid", request, pinnedNode: undefined, nodes, leases, bound: new Map(), nowMs: clock.now(), ...over };
}

describe("decidePlacement", () => {
  it("picks the least allocated fitting node", () => {
    const nodes = [node("c"), node("b"), node("a")];
    const busy = new Map([["a", [bound("x", 4)]], ["c", [bound("y", 4)]]]);
    for (const vmUid of ["u1", "u2", "u3", "u4", "u5"]) assert.deepEqual(decidePlacement(input(nodes, { bound: busy, vmUid })), { kind: "bind", nodeName: "b", rollForward: false });
  });

  it("spreads VMs placed from one view over the nodes about as empty as the emptiest, each VM always to the same one", () => {
    const nodes = ["a", "b", "c", "d", "e", "f"].map((n) => node(n, { cap: [64, 65536, 32] }));
    // "f" is one VM fuller than the others: within the tolerance, still a candidate; "a" is far fuller.
    const busy = new Map([["a", [bound("x", 32)]], ["f", [bound("y", 2)]]]);
    const chosen = new Map<string, number>();
    for (let i = 0; i < 200; i++) {
      const d = decidePlacement(input(nodes, { bound: busy, vmUid: `vm-${i}` }));
      assert.equal(d.kind, "bind");
      if (d.kind !== "bind") continue;
      chosen.set(d.nodeName, (chosen.get(d.nodeName) ?? 0) + 1);
      assert.deepEqual(decidePlacement(input(nodes, { bound: busy, vmUid: `vm-${i}` })), d, "the same VM in the same state: the same node");
    }
    assert.equal(chosen.get("a"), undefined, "the far fuller node is not chosen");
    assert.deepEqual([...chosen.keys()].sort(), ["b", "c", "d", "e", "f"]);
    for (const [name, n] of chosen) assert.ok(n >= 20, `${name} got ${n} of 200: spread, not piled onto one node`);
  });

  it("never chooses a node whose Lease is stale or missing, and says so", () => {
    const nodes = [node("a"), node("b")];
    const leases = new Map([["a", lease(41_000)]]);
    const d = decidePlacement(input(nodes, { leases }));
    assert.equal(d.kind, "unschedulable");
    assert.match(d.kind === "unschedulable" ? d.message : "", /^0\/2 nodes fit \(VM needs 2 vCPU, 1024 MiB, 1 VM slot\): a: agent Lease stale; b: no agent Lease$/);
    // Fresh until the lease duration has passed on the operator's clock.
    assert.equal(decidePlacement(input([node("a")], { leases: new Map([["a", lease(39_999)]]) })).kind, "bind");
    // The node-loss bound applies too, when it is shorter than the Lease's own duration.
    assert.equal(decidePlacement(input([node("a")], { leases: new Map([["a", lease(3_000)]]), maxLeaseAgeMs: 3_000 })).kind, "unschedulable");
    assert.equal(decidePlacement(input([node("a")], { leases: new Map([["a", lease(2_999)]]), maxLeaseAgeMs: 3_000 })).kind, "bind");
  });

  it("never chooses a node whose core Node was deleted, though its agent's Lease is fresh", () => {
    const nodes = [node("a"), node("b")];
    assert.deepEqual(decidePlacement(input(nodes, { deletedKubeNodes: new Set(["a"]) })), { kind: "bind", nodeName: "b", rollForward: false });
    const d = decidePlacement(input([node("a")], { deletedKubeNodes: new Set(["a"]) }));
    assert.match(d.kind === "unschedulable" ? d.message : "", /a: its Node was deleted$/);
  });

  it("never chooses a node whose core Node is cordoned (kubectl cordon, drain); a deleted Node says so first", () => {
    const nodes = [node("a"), node("b")];
    assert.deepEqual(decidePlacement(input(nodes, { cordonedKubeNodes: new Set(["a"]) })), { kind: "bind", nodeName: "b", rollForward: false });
    const d = decidePlacement(input([node("a")], { cordonedKubeNodes: new Set(["a"]) }));
    assert.match(d.kind === "unschedulable" ? d.message : "", /a: its Node is cordoned \(kubectl cordon\)$/);
    const both = decidePlacement(input([node("a")], { cordonedKubeNodes: new Set(["a"]), deletedKubeNodes: new Set(["a"]) }));
    assert.match(both.kind === "unschedulable" ? both.message : "", /a: its Node was deleted$/);
    assert.deepEqual(decidePlacement(input(nodes, { cordonedKubeNodes: new Set() })).kind, "bind", "uncordoned: it fits again");
  });

  it("names what did not fit on each node", () => {
    const nodes = [node("a", { cap: [2, 8192, 4] }), node("b", { unschedulable: true }), node("c", { arch: "arm64" }), node("d", { kernels: ["other"] }), node("e", { cap: [8, 8192, 1] })];
    const b = new Map([["a", [bound("x", 1)]], ["e", [bound("y", 1)]]]);
    const d = decidePlacement(input(nodes, { bound: b }));
    assert.equal(d.kind, "unschedulable");
    const message = d.kind === "unschedulable" ? d.message : "";
    assert.match(message, /a: not enough vcpu;/);
    assert.match(message, /b: cordoned \(spec\.unschedulable\);/);
    assert.match(message, /c: arch arm64, VM needs amd64;/);
    assert.match(message, /d: no kernel "default";/);
    assert.match(message, /e: not enough VM slots$/);
  });

  it("terminal VMs free their share; reservations count even before the VM shows as bound", () => {
    const n = node("a", { cap: [4, 8192, 4] });
    assert.equal(decidePlacement(input([n], { bound: new Map([["a", [bound("x", 4, "Succeeded")]]]) })).kind, "bind");
    assert.equal(decidePlacement(input([n], { bound: new Map([["a", [bound("x", 4, "Running")]]]) })).kind, "unschedulable");
    const reserved = node("a", { cap: [4, 8192, 4], reservations: serializeReservations({ other: { namespace: "ns", name: "o", vcpu: 3, memoryMiB: 512 } }) });
    assert.equal(decidePlacement(input([reserved])).kind, "unschedulable");
  });

  it("counts a VM in both the record and the bound list once", () => {
    const record = { x: { namespace: "ns", name: "x", vcpu: 2, memoryMiB: 1024 } };
    assert.deepEqual(nodeUsage(record, [bound("x", 2), bound("y", 1)]), { vcpu: 3, memoryMiB: 2048, vmSlots: 2 });
  });

  it("a pinned VM goes only to its node, and only if it fits", () => {
    const nodes = [node("a"), node("b", { cap: [1, 8192, 4] })];
    assert.deepEqual(decidePlacement(input(nodes, { pinnedNode: "b" })).kind, "unschedulable");
    assert.match(JSON.stringify(decidePlacement(input(nodes, { pinnedNode: "b" }))), /pinned node does not fit.*b: not enough vcpu/);
    assert.deepEqual(decidePlacement(input(nodes, { pinnedNode: "a" })), { kind: "bind", nodeName: "a", rollForward: false });
    assert.match(JSON.stringify(decidePlacement(input(nodes, { pinnedNode: "zz" }))), /pinned to node zz, which has no ImpNode/);
  });

  it("rolls an existing reservation forward instead of placing the VM again", () => {
    const full = node("b", { cap: [2, 1024, 1], reservations: serializeReservations({ "vm-uid": { namespace: "ns", name: "v", vcpu: 2, memoryMiB: 1024 } }) });
    assert.deepEqual(decidePlacement(input([node("a"), full])), { kind: "bind", nodeName: "b", rollForward: true });
  });

  it("refuses a node with an unreadable record and runner VMs on nodes without a setup key", () => {
    assert.match(JSON.stringify(decidePlacement(input([node("a", { reservations: "{not json" })]))), /a: annotation imp.dev\/reservations is not JSON/);
    const runner = { ...request, needsSetupKey: true };
    assert.match(JSON.stringify(decidePlacement(input([node("a")], { request: runner }))), /no setup key/);
    assert.equal(decidePlacement(input([node("a", { setupKey: true })], { request: runner })).kind, "bind");
  });
});
