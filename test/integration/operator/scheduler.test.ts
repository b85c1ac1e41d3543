/**
 * The scheduler against a real API server (kube-apiserver + etcd, CRDs installed), with simulated
 * agents: the test writes each ImpNode's status and renews its agent Lease itself. Two scheduler
 * instances with their own informers stand for two operator replicas overlapping in a handover.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, CONDITION_TYPES, LABELS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMTemplate, IMP_NODES, IMP_VMS, IMP_VM_CLASSES, IMP_VM_TEMPLATES, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { EVENT_RESOURCE, EventRecorder, Informer, LEASE_RESOURCE, createResourceClient, microTime, type CoreEvent, type KubeObject, type Lease, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { agentLeaseName, parseReservations, SchedulerController } from "../../../src/operator/scheduler/index.ts";
import { FaultPoints, parseFaultPlan, waitFor } from "../../../src/shared/index.ts";

const VMS = IMP_VMS;
const NODES = IMP_NODES;
const CLASSES = IMP_VM_CLASSES;
const TEMPLATES = IMP_VM_TEMPLATES;
const NAMESPACES = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false };
const LEASE_NS = "imp-system";
const NS = "default";
/** Generous: the machine is shared and noisy; nothing here should take more than a few seconds. */
const SETTLE_MS = 90_000;

describe("scheduler against a real API server", { timeout: 600_000 }, () => {
  let plane: ControlPlane;
  let vms: ResourceClient<ImpVM>;
  let nodes: ResourceClient<ImpNode>;
  let leases: ResourceClient<Lease>;
  let events: ResourceClient<CoreEvent>;
  const stops: (() => Promise<void>)[] = [];

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    await installCrds(plane.kubeConfig, buildAllCrds());
    vms = createResourceClient<ImpVM>(plane.kubeConfig, VMS);
    nodes = createResourceClient<ImpNode>(plane.kubeConfig, NODES);
    leases = createResourceClient<Lease>(plane.kubeConfig, LEASE_RESOURCE);
    events = createResourceClient<CoreEvent>(plane.kubeConfig, EVENT_RESOURCE);
    await createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES).create({ metadata: { name: LEASE_NS } });
    await createResourceClient<ImpVMClass>(plane.kubeConfig, CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "1Gi", arch: "amd64" } });
    await createResourceClient<ImpVMTemplate>(plane.kubeConfig, TEMPLATES).create({
      apiVersion: API_VERSION,
      kind: "ImpVMTemplate",
      metadata: { name: "t", namespace: NS },
      spec: { classRef: { name: "small" }, image: "registry.test/img:1", kernel: "default", expireAfter: "1h", workload: { command: ["true"] } },
    });
  });
  after(async () => {
    for (const stop of stops.splice(0)) await stop();
    await plane?.stop();
  });

  /** One operator replica's scheduler: its own informers, clients and metrics. */
  const registries = new Map<string, Registry>();
  /** Reconciles of the placement controller `name` that ended in `result` (e.g. a refused reservation is a conflict). */
  async function reconciles(name: string, result: string): Promise<number> {
    const metric = registries.get(name)?.getSingleMetric("imp_controller_reconcile_total");
    const values = (await metric?.get())?.values ?? [];
    return values.filter((v) => v.labels["controller"] === name && v.labels["result"] === result).reduce((a, v) => a + v.value, 0);
  }

  async function startScheduler(name: string, faults?: FaultPoints): Promise<() => Promise<void>> {
    const kc = plane.kubeConfig;
    const vmInformer = new Informer({ client: createResourceClient<ImpVM>(kc, VMS) });
    const nodeInformer = new Informer({ client: createResourceClient<ImpNode>(kc, NODES) });
    const leaseInformer = new Informer({ client: createResourceClient<Lease>(kc, LEASE_RESOURCE), namespace: LEASE_NS });
    const classInformer = new Informer({ client: createResourceClient<ImpVMClass>(kc, CLASSES) });
    const templateInformer = new Informer({ client: createResourceClient<ImpVMTemplate>(kc, TEMPLATES) });
    const caches = [vmInformer, nodeInformer, leaseInformer, classInformer, templateInformer];
    const scheduler = new SchedulerController({
      name,
      vms: createResourceClient<ImpVM>(kc, VMS),
      nodes: createResourceClient<ImpNode>(kc, NODES),
      vmInformer,
      nodeInformer,
      leaseInformer,
      leaseNamespace: LEASE_NS,
      classInformer,
      templateInformer,
      registry: registries.set(name, new Registry()).get(name) as Registry,
      recorder: new EventRecorder({ client: createResourceClient<CoreEvent>(kc, EVENT_RESOURCE), component: "imp-operator", instance: name }),
      workers: 2,
      ...(faults === undefined ? {} : { faults }),
    });
    const ac = new AbortController();
    const running = caches.map((c) => c.start(ac.signal));
    await Promise.all(caches.map((c) => c.waitForSync(ac.signal)));
    const controller = scheduler.start(ac.signal);
    const stop = async (): Promise<void> => {
      ac.abort();
      await Promise.allSettled([controller, ...running]);
    };
    stops.push(stop);
    return stop;
  }

  /** A simulated agent: its ImpNode (with capacity) and a Lease renewed `renewedAgoMs` ago. */
  async function agentNode(name: string, capacity: { vcpu: number; memoryMiB: number; vmSlots: number }, renewedAgoMs = 0): Promise<void> {
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name }, spec: { unschedulable: false } });
    await nodes.patchStatus({ name }, { status: { arch: "amd64", kernels: ["default"], capacity, allocated: { vcpu: 0, memoryMiB: 0, vmSlots: 0 } } });
    await leases.create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: agentLeaseName(name), namespace: LEASE_NS }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: microTime(Date.now() - renewedAgoMs) } });
  }
  const renew = (name: string): Promise<Lease> => leases.patch({ namespace: LEASE_NS, name: agentLeaseName(name) }, { spec: { renewTime: microTime(Date.now()) } });
  /** Removes a test's nodes so later tests do not place VMs on them. */
  async function retire(...names: string[]): Promise<void> {
    for (const name of names) {
      await nodes.delete({ name });
      await leases.delete({ namespace: LEASE_NS, name: agentLeaseName(name) });
    }
  }

  async function createVm(name: string, namespace = NS): Promise<number> {
    await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral" } } as ImpVM);
    return Date.now();
  }
  const get = (name: string): Promise<ImpVM> => vms.get({ namespace: NS, name });
  const waitBound = (name: string): Promise<ImpVM> =>
    waitFor(`ImpVM ${name} bound`, async () => { const vm = await get(name); return vm.status?.nodeName === undefined ? undefined : vm; }, { timeoutMs: SETTLE_MS, intervalMs: 25 });
  const waitUnschedulable = (name: string, pattern: RegExp): Promise<string> =>
    waitFor(`ImpVM ${name} Unschedulable`, async () => {
      const c = (await get(name)).status?.conditions?.find((x) => x.type === CONDITION_TYPES.vm.Scheduled);
      return c?.status === "False" && c.reason === "Unschedulable" && pattern.test(c.message) ? c.message : undefined;
    }, { timeoutMs: SETTLE_MS, intervalMs: 50 });
  /** As the agent would when a workload ends. */
  const finish = (name: string): Promise<ImpVM> => vms.patchStatus({ namespace: NS, name }, { status: { phase: "Succeeded", exitCode: 0 } });

  it("binds VMs within capacity, spread across nodes, with label, timestamps, condition and event", async () => {
    await agentNode("bind-a", { vcpu: 4, memoryMiB: 4096, vmSlots: 3 });
    await agentNode("bind-b", { vcpu: 4, memoryMiB: 4096, vmSlots: 3 });
    const stop = await startScheduler("s-bind");
    const latencies: number[] = [];
    const names = ["b1", "b2", "b3", "b4"];
    for (const name of names) {
      const created = await createVm(name);
      const vm = await waitBound(name);
      latencies.push(Date.now() - created);
      assert.equal(vm.status?.phase, "Scheduled");
      assert.ok(vm.status?.phaseTimestamps?.scheduled);
      assert.deepEqual(vm.status?.conditions?.map((c) => [c.type, c.status, c.reason]), [["Scheduled", "True", "Scheduled"]]);
    }
    const placed = await Promise.all(names.map(async (n) => (await get(n)).status?.nodeName));
    assert.deepEqual(placed.sort(), ["bind-a", "bind-a", "bind-b", "bind-b"], "least-allocated spreads the VMs");
    await waitFor("labels", async () => ((await Promise.all(names.map(get))).every((vm) => vm.metadata.labels?.[LABELS.node] === vm.status?.nodeName) ? true : undefined), { timeoutMs: SETTLE_MS });
    const scheduledEvents = (await events.list({ namespace: NS })).items.filter((e) => e.reason === "Scheduled");
    assert.ok(names.every((n) => scheduledEvents.some((e) => e.involvedObject?.name === n && /^Bound to node bind-[ab]/.test(e.message ?? ""))));
    console.log(`# bind latency (create → status.nodeName seen, one VM at a time, 2 nodes): ${latencies.map((l) => `${l} ms`).join(", ")}`);
    await stop();
    for (const n of names) await finish(n);
    await retire("bind-a", "bind-b");
  });

  it("a full node makes a VM Unschedulable with a clear condition; capacity freed by a VM ending binds it", async () => {
    await agentNode("full-c", { vcpu: 4, memoryMiB: 4096, vmSlots: 1 });
    const stop = await startScheduler("s-full");
    await createVm("f1");
    assert.equal((await waitBound("f1")).status?.nodeName, "full-c");
    await createVm("f2");
    const message = await waitUnschedulable("f2", /full-c/);
    assert.equal(message, "0/1 nodes fit (VM needs 1 vCPU, 512 MiB, 1 VM slot): full-c: not enough VM slots");
    assert.equal((await get("f2")).status?.phase, "Pending");
    const warned = (await events.list({ namespace: NS })).items.some((e) => e.reason === "FailedScheduling" && e.involvedObject?.name === "f2");
    assert.ok(warned, "a FailedScheduling event names the VM");
    const freedAt = Date.now();
    await finish("f1");
    const vm = await waitBound("f2");
    console.log(`# freed capacity → pending VM bound in ${Date.now() - freedAt} ms (release of the ended VM's reservation, then the requeue)`);
    assert.equal(vm.status?.nodeName, "full-c");
    assert.equal(vm.status?.conditions?.find((c) => c.type === "Scheduled")?.status, "True");
    await stop();
    await finish("f2");
    await retire("full-c");
  });

  it("never chooses a node whose Lease is stale; a renewal makes it eligible again", async () => {
    await agentNode("stale-e", { vcpu: 16, memoryMiB: 16384, vmSlots: 10 }, 60_000);
    await agentNode("cordon-g", { vcpu: 16, memoryMiB: 16384, vmSlots: 10 });
    await nodes.patch({ name: "cordon-g" }, { spec: { unschedulable: true } });
    const stop = await startScheduler("s-stale");
    await createVm("s1");
    const message = await waitUnschedulable("s1", /stale-e/);
    assert.equal(message, "0/2 nodes fit (VM needs 1 vCPU, 512 MiB, 1 VM slot): cordon-g: cordoned (spec.unschedulable); stale-e: agent Lease stale");
    await renew("stale-e");
    assert.equal((await waitBound("s1")).status?.nodeName, "stale-e");
    await stop();
    await finish("s1");
    await retire("stale-e", "cordon-g");
  });

  it("a replica that died between reserving and binding leaks nothing: its reservation is rolled forward, one for a vanished VM is released", async () => {
    await agentNode("hand-1", { vcpu: 8, memoryMiB: 8192, vmSlots: 2 });
    await agentNode("hand-2", { vcpu: 8, memoryMiB: 8192, vmSlots: 2 });
    await createVm("h1");
    const h1 = await get("h1");
    // What a dead replica left: h1 reserved on the fuller node, and a reservation for a VM that no longer exists.
    const record = {
      [h1.metadata.uid ?? ""]: { namespace: NS, name: "h1", vcpu: 1, memoryMiB: 512 },
      "00000000-0000-0000-0000-000000000000": { namespace: NS, name: "vanished", vcpu: 1, memoryMiB: 512 },
    };
    await nodes.patch({ name: "hand-2" }, { metadata: { annotations: { "imp.dev/reservations": JSON.stringify(record) } } });
    const stop = await startScheduler("s-hand");
    assert.equal((await waitBound("h1")).status?.nodeName, "hand-2", "bound where it was reserved, though hand-1 is emptier");
    const released = await waitFor("vanished VM's reservation released", async () => {
      const parsed = parseReservations(await nodes.get({ name: "hand-2" }));
      return parsed.ok && Object.keys(parsed.record).length === 1 ? Object.keys(parsed.record) : undefined;
    }, { timeoutMs: SETTLE_MS, intervalMs: 100 });
    assert.deepEqual(released, [h1.metadata.uid]);
    await stop();
    await finish("h1");
    await retire("hand-1", "hand-2");
  });

  it("a fault after reserving and before binding (scheduler.before-bind=fail@1): the retry binds the VM where it is reserved, one reservation", async () => {
    await agentNode("fault-1", { vcpu: 8, memoryMiB: 8192, vmSlots: 2 });
    const fired: string[] = [];
    const faults = new FaultPoints(parseFaultPlan("scheduler.before-bind=fail@1"), (point, action) => fired.push(`${point}=${action.kind}`));
    const stop = await startScheduler("s-fault", faults);
    await createVm("fb1");
    const vm = await waitBound("fb1");
    assert.equal(vm.status?.nodeName, "fault-1");
    assert.deepEqual(fired, ["scheduler.before-bind=fail"], "the fault acted once, with the reservation written and the VM unbound");
    assert.ok(faults.hits("scheduler.before-bind") >= 2, "the retry passed the point again and bound");
    const parsed = parseReservations(await nodes.get({ name: "fault-1" }));
    assert.ok(parsed.ok);
    assert.deepEqual(Object.keys(parsed.record), [vm.metadata.uid], "one reservation, the bound VM's");
    await stop();
    await finish("fb1");
    await retire("fault-1");
  });

  it("two scheduler instances racing over many VMs and tight nodes never overcommit", async () => {
    const caps = { "race-1": 5, "race-2": 3 } as const;
    await agentNode("race-1", { vcpu: 64, memoryMiB: 65536, vmSlots: caps["race-1"] });
    await agentNode("race-2", { vcpu: 3, memoryMiB: 65536, vmSlots: 10 }); // vCPU is the tight dimension here
    const total = 40;
    const names = Array.from({ length: total }, (_, i) => `r${i}`);
    // Both replicas are up before the burst, so every VM is contended from its first event.
    await startScheduler("s-race-a");
    await startScheduler("s-race-b");
    const started = Date.now();
    await Promise.all(names.map((n) => createVm(n)));

    const capacity = caps["race-1"] + caps["race-2"];
    const settle = async (expectedBound: number): Promise<ImpVM[]> =>
      waitFor("race to settle", async () => {
        const items = (await vms.list({ namespace: NS })).items.filter((vm) => names.includes(vm.metadata.name ?? ""));
        const live = items.filter((vm) => vm.status?.nodeName !== undefined && vm.status.phase !== "Succeeded");
        const waiting = items.filter((vm) => vm.status?.nodeName === undefined && vm.status?.conditions?.some((c) => c.reason === "Unschedulable"));
        return live.length === expectedBound && waiting.length === items.filter((vm) => vm.status?.nodeName === undefined).length ? items : undefined;
      }, { timeoutMs: SETTLE_MS, intervalMs: 100 });

    const assertNoOvercommit = async (items: ImpVM[]): Promise<Record<string, number>> => {
      const perNode: Record<string, number> = { "race-1": 0, "race-2": 0 };
      for (const vm of items) if (vm.status?.nodeName !== undefined && vm.status.phase !== "Succeeded") perNode[vm.status.nodeName] = (perNode[vm.status.nodeName] ?? 0) + 1;
      assert.ok((perNode["race-1"] ?? 0) <= caps["race-1"], `race-1 holds ${perNode["race-1"]} VMs, capacity ${caps["race-1"]}`);
      assert.ok((perNode["race-2"] ?? 0) <= caps["race-2"], `race-2 holds ${perNode["race-2"]} VMs (1 vCPU each), capacity 3 vCPU`);
      return perNode;
    };

    const first = await settle(capacity);
    const settledMs = Date.now() - started;
    const perNode = await assertNoOvercommit(first);
    assert.deepEqual(perNode, { "race-1": 5, "race-2": 3 }, "all capacity is used");
    // The records converge to exactly the bound VMs (a losing replica's reservation is released).
    await waitFor("records match bindings", async () => {
      for (const node of ["race-1", "race-2"]) {
        const parsed = parseReservations(await nodes.get({ name: node }));
        const boundUids = first.filter((vm) => vm.status?.nodeName === node).map((vm) => vm.metadata.uid).sort();
        if (!parsed.ok || JSON.stringify(Object.keys(parsed.record).sort()) !== JSON.stringify(boundUids)) return undefined;
      }
      return true;
    }, { timeoutMs: SETTLE_MS, intervalMs: 200 });

    // Free three slots at once: the waiting VMs race for them, through both replicas again.
    const toFinish = first.filter((vm) => vm.status?.nodeName !== undefined).slice(0, 3).map((vm) => vm.metadata.name ?? "");
    for (const n of toFinish) await finish(n);
    const second = await settle(capacity);
    await assertNoOvercommit(second);
    const everBound = second.filter((vm) => vm.status?.nodeName !== undefined).length;
    const conflicts = (await reconciles("s-race-a", "conflict")) + (await reconciles("s-race-b", "conflict"));
    const successes = (await reconciles("s-race-a", "success")) + (await reconciles("s-race-b", "success"));
    console.log(`# race: 2 schedulers, ${total} VMs, 2 nodes (5 slots; 3 vCPU): ${capacity} bound, none over capacity, settled in ${settledMs} ms; after 3 ended, ${everBound - 3} live bound of ${everBound} ever bound; placement reconciles: ${successes} success, ${conflicts} conflict (reservation refused or lost a write race)`);
    assert.equal(everBound, capacity + 3);
    for (const n of names) if ((await get(n)).status?.nodeName !== undefined) await finish(n).catch(() => undefined);
  });
});
