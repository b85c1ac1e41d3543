/**
 * SchedulerController.capacityForPool, what a scale-set pool tells GitHub it can hold: on caches
 * fed by fake API clients, a fake clock (so the 200 ms look at the cluster is dropped only by
 * roomChanged(), as the operator's VM and node handlers do).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, IMP_NODES, IMP_VM_CLASSES, IMP_VM_TEMPLATES, IMP_VMS, LABELS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMTemplate } from "../../api/index.ts";
import { FakeResourceClient, Informer, LEASE_RESOURCE, microTime, type Lease } from "../../kube/index.ts";
import { FakeClock, waitFor } from "../../shared/index.ts";
import { agentLeaseName } from "./agent-lease.ts";
import { RESERVATIONS_ANNOTATION, serializeReservations } from "./reservations.ts";
import { SchedulerController } from "./scheduler-controller.ts";

const NS = "ci";
const LEASE_NS = "imp-system";
const POOL = { metadata: { namespace: NS, name: "linux" }, spec: { templateName: "small" } } as const;

describe("capacityForPool: placed VMs plus the room left once other pools' waiting VMs took theirs", () => {
  const clock = new FakeClock(Date.parse("2026-12-06T12:00:00Z"));
  const stop = new AbortController();
  const vms = new FakeResourceClient<ImpVM>(IMP_VMS, { clock });
  const nodes = new FakeResourceClient<ImpNode>(IMP_NODES, { clock });
  const leases = new FakeResourceClient<Lease>(LEASE_RESOURCE, { clock });
  const classes = new FakeResourceClient<ImpVMClass>(IMP_VM_CLASSES, { clock });
  const templates = new FakeResourceClient<ImpVMTemplate>(IMP_VM_TEMPLATES, { clock });
  const informers = { vm: new Informer({ client: vms }), node: new Informer({ client: nodes }), lease: new Informer({ client: leases, namespace: LEASE_NS }), cls: new Informer({ client: classes }), tpl: new Informer({ client: templates }) };
  let scheduler: SchedulerController;
  let n = 0;

  /** A VM of `pool` (its label): bound to `node`, waiting, or waiting with a reservation on node `on`. */
  async function vm(pool: string, where: { node?: string; reserved?: boolean; on?: string; phase?: "Running" | "Succeeded" } = {}): Promise<ImpVM> {
    const created = await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: `${pool}-${n++}`, namespace: NS, labels: { [LABELS.pool]: pool } }, spec: { templateRef: { name: "small" }, lifecycle: "ephemeral" } } as ImpVM);
    if (where.node !== undefined) await vms.patchStatus({ namespace: NS, name: created.metadata.name ?? "" }, { status: { phase: where.phase ?? "Running", nodeName: where.node } });
    if (where.reserved === true) {
      const on = where.on ?? "node-a";
      const node = await nodes.get({ name: on });
      const record = JSON.parse(node.metadata.annotations?.[RESERVATIONS_ANNOTATION] ?? "{}") as Record<string, unknown>;
      record[created.metadata.uid ?? ""] = { namespace: NS, name: created.metadata.name, vcpu: 1, memoryMiB: 512 };
      await nodes.patch({ name: on }, { metadata: { annotations: { [RESERVATIONS_ANNOTATION]: serializeReservations(record as never) } } });
    }
    return created;
  }

  /** Until the caches hold every write made so far (each object at its stored resourceVersion). */
  async function synced(): Promise<void> {
    await waitFor("the caches caught up", async () => {
      const [allVms, allNodes] = await Promise.all([vms.list({}), nodes.list({})]);
      const vmsIn = allVms.items.every((o) => informers.vm.get(`${NS}/${o.metadata.name ?? ""}`)?.metadata.resourceVersion === o.metadata.resourceVersion);
      const nodesIn = allNodes.items.every((o) => informers.node.get(o.metadata.name ?? "")?.metadata.resourceVersion === o.metadata.resourceVersion);
      return vmsIn && nodesIn ? true : undefined;
    }, { timeoutMs: 10_000, intervalMs: 5 });
  }

  /** The capacity once the caches caught up with the writes above (the look at the cluster dropped first). */
  async function capacity(): Promise<number> {
    await synced();
    scheduler.roomChanged();
    return scheduler.capacityForPool(POOL);
  }

  before(async () => {
    await classes.create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "1Gi", arch: "amd64" } });
    await templates.create({ apiVersion: API_VERSION, kind: "ImpVMTemplate", metadata: { name: "small", namespace: NS }, spec: { classRef: { name: "small" }, image: "r/i:1", kernel: "default", expireAfter: "1h", workload: { command: ["true"] } } });
    for (const name of ["node-a", "node-b"]) {
      await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name } } as ImpNode);
      await nodes.patchStatus({ name }, { status: { capacity: { vcpu: 8, memoryMiB: 8192, vmSlots: 2 }, arch: "amd64", setupKey: { algorithm: "x", keyId: "0123456789abcdef", publicKey: "A".repeat(44) } } });
      await leases.create({ metadata: { name: agentLeaseName(name), namespace: LEASE_NS }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: microTime(clock.now()) } });
    }
    scheduler = new SchedulerController({ vms, nodes, vmInformer: informers.vm, nodeInformer: informers.node, leaseInformer: informers.lease, leaseNamespace: LEASE_NS, classInformer: informers.cls, templateInformer: informers.tpl, registry: new Registry(), clock });
    for (const i of Object.values(informers)) void i.start(stop.signal);
    await Promise.all(Object.values(informers).map((i) => i.waitForSync(stop.signal)));
  });
  after(() => stop.abort());

  it("counts placed VMs once, reserved ones as placed, its own waiting ones inside its room, and others' waiting ones against it", async () => {
    assert.equal(await capacity(), 4, "two nodes of two slots, nothing on them");
    await vm("linux", { node: "node-a" });
    assert.equal(await capacity(), 4, "a placed VM is held, and its slot is not room: still 4, not 5");
    await vm("docker");
    assert.equal(await capacity(), 3, "another pool's waiting VM takes a slot first");
    await vm("linux");
    assert.equal(await capacity(), 3, "its own waiting VM is placed in its room: it does not count twice");
    await vm("docker", { reserved: true, on: "node-a" });
    assert.equal(await capacity(), 2, "another pool's VM reserved on a node holds that slot");
    await vm("linux", { reserved: true, on: "node-b" });
    assert.equal(await capacity(), 2, "its own reserved VM counts as placed; the last slot goes to the older waiting VM, the other pool's");
    await vm("linux", { node: "node-b", phase: "Succeeded" });
    assert.equal(await capacity(), 2, "an ended VM holds nothing");
  });

  it("the look at the cluster is kept until room changes: a later write is seen only after roomChanged()", async () => {
    const before = await capacity();
    await nodes.patchStatus({ name: "node-b" }, { status: { capacity: { vcpu: 8, memoryMiB: 8192, vmSlots: 4 } } });
    await synced();
    assert.equal(scheduler.capacityForPool(POOL), before, "the same look, 0 ms later on the fake clock");
    scheduler.roomChanged();
    assert.equal(scheduler.capacityForPool(POOL), before + 2, "after roomChanged() node-b's two new slots count");
  });

  it("a pool whose template does not resolve can hold only what it has placed", () => {
    scheduler.roomChanged();
    assert.equal(scheduler.capacityForPool({ metadata: { namespace: NS, name: "linux" }, spec: { templateName: "missing" } }), 2);
  });
});
