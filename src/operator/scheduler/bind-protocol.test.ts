import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { type ImpNode, type ImpVM, IMP_NODES, IMP_VMS, LABELS } from "../../api/index.ts";
import { FakeResourceClient, type Stored } from "../../kube/index.ts";
import { bindVm, fateOf, labelVm, markUnschedulable, release, RELEASABLE, reserve } from "./bind-protocol.ts";
import { parseReservations } from "./reservations.ts";
import type { VmRequest } from "./vm-request.ts";

const request: VmRequest = { vcpu: 1, memoryMiB: 256, vmSlots: 1, arch: "amd64", kernel: "default", needsSetupKey: false };
const vm = (name: string, status?: ImpVM["status"], extra: Partial<ImpVM["metadata"]> = {}): Stored<ImpVM> => ({
  apiVersion: "imp.dev/v1alpha1",
  kind: "ImpVM",
  metadata: { name, namespace: "ns", uid: `uid-${name}`, ...extra },
  spec: { templateRef: { name: "t" }, lifecycle: "ephemeral" },
  ...(status === undefined ? {} : { status }),
});

async function nodeClient(slots: number): Promise<FakeResourceClient<ImpNode>> {
  const nodes = new FakeResourceClient<ImpNode>(IMP_NODES);
  await nodes.create({ apiVersion: "imp.dev/v1alpha1", kind: "ImpNode", metadata: { name: "n" }, spec: { unschedulable: false } });
  await nodes.patchStatus({ name: "n" }, { status: { capacity: { vcpu: 100, memoryMiB: 100_000, vmSlots: slots } } });
  return nodes;
}

describe("bind protocol", () => {
  it("concurrent reservations never exceed the node's capacity", async () => {
    const nodes = await nodeClient(3);
    const results = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => reserve(nodes, { nodeName: "n", vm: vm(`v${i}`), request, bound: [] })));
    const reserved = results.filter((r) => r.status === "fulfilled" && r.value.outcome === "reserved").length;
    const parsed = parseReservations(await nodes.get({ name: "n" }));
    assert.ok(parsed.ok);
    assert.equal(Object.keys(parsed.record).length, 3);
    assert.equal(reserved, 3);
  });

  it("a repeated reservation is a no-op and release removes only the named uids", async () => {
    const nodes = await nodeClient(3);
    assert.equal((await reserve(nodes, { nodeName: "n", vm: vm("a"), request, bound: [] })).outcome, "reserved");
    assert.equal((await reserve(nodes, { nodeName: "n", vm: vm("b"), request, bound: [] })).outcome, "reserved");
    assert.equal((await reserve(nodes, { nodeName: "n", vm: vm("a"), request, bound: [] })).outcome, "alreadyReserved");
    await release(nodes, "n", ["uid-a"]);
    const parsed = parseReservations(await nodes.get({ name: "n" }));
    assert.deepEqual(parsed.ok ? Object.keys(parsed.record) : [], ["uid-b"]);
  });

  it("bound VMs the record lacks still count", async () => {
    const nodes = await nodeClient(1);
    const r = await reserve(nodes, { nodeName: "n", vm: vm("a"), request, bound: [{ uid: "other", phase: "Running", resources: request }] });
    assert.deepEqual(r, { outcome: "noFit", detail: "not enough VM slots" });
  });

  it("only releases reservations of VMs that can never be bound to the node again", () => {
    const cases: [Stored<ImpVM> | undefined, string][] = [
      [vm("a"), "pending"],
      [vm("a", { phase: "Pending" }), "pending"],
      [vm("a", { phase: "Scheduled", nodeName: "n" }), "boundHere"],
      [vm("a", { phase: "Scheduled", nodeName: "m" }), "boundElsewhere"],
      [vm("a", { phase: "Failed" }), "terminal"],
      [vm("a", undefined, { deletionTimestamp: "2026-01-01T00:00:00Z" }), "deletingUnbound"],
      [undefined, "unknown"],
    ];
    for (const [v, fate] of cases) assert.equal(fateOf(v, "uid-a", "n"), fate);
    assert.deepEqual([...RELEASABLE].sort(), ["boundElsewhere", "deletingUnbound", "gone", "terminal"]);
  });

  it("binds once; a second bind to another node is refused and reports where the VM went", async () => {
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const created = await vms.create(vm("a"));
    assert.equal((await bindVm(vms, { vm: created, nodeName: "n", nowMs: 0 })).outcome, "bound");
    assert.equal((await bindVm(vms, { vm: created, nodeName: "m", nowMs: 0 })).outcome, "boundElsewhere");
    assert.equal((await bindVm(vms, { vm: created, nodeName: "n", nowMs: 0 })).outcome, "alreadyBound");
    const stored = await vms.get({ namespace: "ns", name: "a" });
    assert.equal(stored.status?.phase, "Scheduled");
    assert.equal(stored.status?.nodeName, "n");
    assert.equal(stored.status?.conditions?.[0]?.status, "True");
  });

  it("labels the VM from the copy its bind stored, without reading it again; a stale copy costs a read, not the label", async () => {
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const created = await vms.create(vm("a"));
    let gets = 0;
    const counting = { get: (...a: Parameters<typeof vms.get>) => ((gets++), vms.get(...a)), patch: vms.patch.bind(vms), patchStatus: vms.patchStatus.bind(vms) };
    const { outcome, stored } = await bindVm(counting, { vm: created, nodeName: "n", nowMs: 0 });
    assert.equal(outcome, "bound");
    assert.ok(stored !== undefined);
    await labelVm(counting, created, "n", undefined, stored);
    assert.equal(gets, 0, "bind and label from copies in hand: no GET");
    assert.equal((await vms.get({ namespace: "ns", name: "a" })).metadata.labels?.[LABELS.node], "n");
    const other = await vms.create(vm("b"));
    const bound = (await bindVm(counting, { vm: other, nodeName: "n", nowMs: 0 })).stored;
    await vms.patchStatus({ namespace: "ns", name: "b" }, { status: { phase: "Booting" } }); // someone wrote after the bind
    await labelVm(counting, other, "n", undefined, bound);
    assert.equal(gets, 1, "the stale copy's 409 cost one read");
    const b = await vms.get({ namespace: "ns", name: "b" });
    assert.equal(b.metadata.labels?.[LABELS.node], "n");
    assert.equal(b.status?.phase, "Booting", "nothing lost");
  });

  it("writes the Unschedulable condition once per message", async () => {
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const created = await vms.create(vm("a"));
    assert.equal(await markUnschedulable(vms, { vm: created, message: "full", nowMs: 0 }), true);
    const first = await vms.get({ namespace: "ns", name: "a" });
    assert.equal(await markUnschedulable(vms, { vm: created, message: "full", nowMs: 5_000 }), false);
    const second = await vms.get({ namespace: "ns", name: "a" });
    assert.equal(second.metadata.resourceVersion, first.metadata.resourceVersion);
    assert.deepEqual(second.status?.conditions?.map((c) => [c.type, c.status, c.reason, c.message]), [["Scheduled", "False", "Unschedulable", "full"]]);
    assert.equal(second.status?.phase, "Pending");
  });
});
