/**
 * Node loss against a real API server with simulated agents (the test renews each node's agent
 * Lease itself, or stops doing so): VMs on a node whose Lease went stale, or whose core/v1 Node was
 * deleted, become Failed/NodeLost and lose their sealed setup and inputs (the lost agent cannot
 * remove them), as do VMs that ended there still holding them; VMs on live nodes are left alone and
 * ended VMs keep their phase; the scheduler, running alongside, never places a VM on the lost node.
 * And draining: a cordoned node takes no new VM, ends a job past its pool's drain grace, and reports
 * drained once its last VM ended; an uncordon forgets it.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import { ANNOTATIONS, API_VERSION, FINALIZERS, generateNodeKeyPair, LABELS, SETUP_SEAL_SUITE, VM_REASONS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMRunnerPool, type ImpVMTemplate, IMP_NODES, IMP_VMS, IMP_VM_CLASSES, IMP_VM_RUNNER_POOLS, IMP_VM_TEMPLATES, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { addFinalizer, EVENT_RESOURCE, EventRecorder, hasFinalizer, Informer, LEASE_RESOURCE, createResourceClient, microTime, type CoreEvent, type KubeObject, type Lease, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { DrainController, NodeLossController } from "../../../src/operator/nodes/index.ts";
import { agentLeaseName, KubeNodeTracker, SchedulerController } from "../../../src/operator/scheduler/index.ts";
import { waitFor } from "../../../src/shared/index.ts";

const VMS = IMP_VMS;
const NODES = IMP_NODES;
const CLASSES = IMP_VM_CLASSES;
const TEMPLATES = IMP_VM_TEMPLATES;
const NAMESPACES = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false };
const KUBE_NODES = { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false };
const LEASE_NS = "imp-system";
const NS = "default";
/** Short so the test is quick; the shipped default is 40 s. */
const LOST_AFTER_MS = 3_000;
const RESTART_GRACE_MS = 15_000;
const RENEW_EVERY_MS = 500;
const SETTLE_MS = 90_000;

describe("node loss against a real API server", { timeout: 600_000 }, () => {
  let plane: ControlPlane;
  let vms: ResourceClient<ImpVM>;
  let nodes: ResourceClient<ImpNode>;
  let leases: ResourceClient<Lease>;
  let kubeNodes: ResourceClient<KubeObject>;
  const registry = new Registry();
  const ac = new AbortController();
  const running: Promise<unknown>[] = [];
  const renewers = new Map<string, NodeJS.Timeout>();

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    await installCrds(plane.kubeConfig, buildAllCrds());
    const kc = plane.kubeConfig;
    vms = createResourceClient<ImpVM>(kc, VMS);
    nodes = createResourceClient<ImpNode>(kc, NODES);
    leases = createResourceClient<Lease>(kc, LEASE_RESOURCE);
    kubeNodes = createResourceClient<KubeObject>(kc, KUBE_NODES);
    await createResourceClient<KubeObject>(kc, NAMESPACES).create({ metadata: { name: LEASE_NS } });
    await createResourceClient<ImpVMClass>(kc, CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "1Gi", arch: "amd64" } });
    await createResourceClient<ImpVMTemplate>(kc, TEMPLATES).create({
      apiVersion: API_VERSION,
      kind: "ImpVMTemplate",
      metadata: { name: "t", namespace: NS },
      spec: { classRef: { name: "small" }, image: "registry.test/img:1", kernel: "default", expireAfter: "1h", workload: { command: ["true"] } },
    });

    const vmInformer = new Informer({ client: createResourceClient<ImpVM>(kc, VMS) });
    const nodeInformer = new Informer({ client: createResourceClient<ImpNode>(kc, NODES) });
    const leaseInformer = new Informer({ client: createResourceClient<Lease>(kc, LEASE_RESOURCE), namespace: LEASE_NS });
    const kubeNodeInformer = new Informer({ client: createResourceClient<KubeObject>(kc, KUBE_NODES) });
    const classInformer = new Informer({ client: createResourceClient<ImpVMClass>(kc, CLASSES) });
    const poolInformer = new Informer({ client: createResourceClient<ImpVMRunnerPool>(kc, IMP_VM_RUNNER_POOLS) });
    const templateInformer = new Informer({ client: createResourceClient<ImpVMTemplate>(kc, TEMPLATES) });
    const caches = [vmInformer, nodeInformer, leaseInformer, kubeNodeInformer, classInformer, templateInformer, poolInformer];
    const recorder = new EventRecorder({ client: createResourceClient<CoreEvent>(kc, EVENT_RESOURCE), component: "imp-operator", instance: "test" });
    const kubeNodeTracker = new KubeNodeTracker(kubeNodeInformer);
    const nodeLoss = new NodeLossController({ vms, leases, vmInformer, nodeInformer, leaseInformer, leaseNamespace: LEASE_NS, kubeNodes: kubeNodeTracker, lostAfterMs: LOST_AFTER_MS, agentRestartGraceMs: RESTART_GRACE_MS, registry, recorder });
    const scheduler = new SchedulerController({ vms, nodes, vmInformer, nodeInformer, leaseInformer, leaseNamespace: LEASE_NS, classInformer, templateInformer, registry, recorder, nodeLostAfterMs: LOST_AFTER_MS, kubeNodes: kubeNodeTracker });
    const drain = new DrainController({ vms, nodes, vmInformer, nodeInformer, poolInformer, kubeNodes: kubeNodeTracker, registry, recorder });
    for (const c of caches) running.push(c.start(ac.signal));
    await Promise.all(caches.map((c) => c.waitForSync(ac.signal)));
    running.push(nodeLoss.start(ac.signal), scheduler.start(ac.signal), drain.start(ac.signal));
  });
  after(async () => {
    for (const timer of renewers.values()) clearInterval(timer);
    ac.abort();
    await Promise.allSettled(running);
    await plane?.stop();
  });

  const renew = (name: string): Promise<Lease> => leases.patch({ namespace: LEASE_NS, name: agentLeaseName(name) }, { spec: { renewTime: microTime(Date.now()) } });
  /** A simulated agent that renews its Lease every RENEW_EVERY_MS until `stopAgent`. */
  async function startAgent(name: string, vmSlots: number): Promise<void> {
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name }, spec: { unschedulable: false } });
    await nodes.patchStatus({ name }, { status: { arch: "amd64", capacity: { vcpu: 16, memoryMiB: 16384, vmSlots } } });
    await leases.create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: agentLeaseName(name), namespace: LEASE_NS }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: microTime(Date.now()) } });
    renewers.set(name, setInterval(() => void renew(name).catch(() => undefined), RENEW_EVERY_MS));
  }
  /** The agent dies: no more renewals. Returns when the last one was sent. */
  async function stopAgent(name: string): Promise<number> {
    clearInterval(renewers.get(name));
    renewers.delete(name);
    await renew(name);
    return Date.now();
  }
  const get = (name: string): Promise<ImpVM> => vms.get({ namespace: NS, name });
  /** Reconciles the node-loss controller finished (any result). */
  async function nodeLossReconciles(): Promise<number> {
    const metric = await registry.getSingleMetric("imp_controller_reconcile_total")?.get();
    return (metric?.values ?? []).filter((v) => v.labels["controller"] === "node-loss").reduce((n, v) => n + v.value, 0);
  }
  async function boundVm(name: string, pinned?: string): Promise<string> {
    await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: NS }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral", ...(pinned === undefined ? {} : { nodeName: pinned }) } } as ImpVM);
    const vm = await waitFor(`ImpVM ${name} bound`, async () => { const v = await get(name); return v.status?.nodeName === undefined ? undefined : v; }, { timeoutMs: SETTLE_MS, intervalMs: 25 });
    return vm.status?.nodeName ?? "";
  }
  /** What the agent does first with a VM bound to it. */
  const heldByAgent = (name: string): Promise<ImpVM> => addFinalizer(vms, { namespace: NS, name }, FINALIZERS.vmTeardown);
  const setPhase = (name: string, status: ImpVM["status"]): Promise<ImpVM> => vms.patchStatus({ namespace: NS, name }, { status });
  /** What the setup and inputs controllers leave: status.setup Minted with its sealed setup, and sealed inputs. */
  async function minted(name: string): Promise<void> {
    await vms.patchStatus({ namespace: NS, name }, { status: { setup: { state: "Minted", sealed: `{"setup-of":"${name}"}` }, inputs: { sealed: `{"inputs-of":"${name}"}` } } });
  }
  const holdsSealed = async (name: string): Promise<boolean> => {
    const st = (await get(name)).status;
    return st?.setup?.sealed !== undefined || st?.inputs !== undefined;
  };
  const sealedGone = (name: string): Promise<boolean> =>
    waitFor(`the sealed setup and inputs of ${name} removed`, async () => ((await holdsSealed(name)) ? undefined : true), { timeoutMs: SETTLE_MS, intervalMs: 50 });
  const waitFailed = (name: string): Promise<ImpVM> =>
    waitFor(`ImpVM ${name} Failed`, async () => { const v = await get(name); return v.status?.phase === "Failed" ? v : undefined; }, { timeoutMs: SETTLE_MS, intervalMs: 50 });

  it("a stale Lease fails the node's live VMs with NodeLost, leaves ended VMs and other nodes alone, and is never chosen", async () => {
    // The dying node's machine is still in the cluster (its Node stays): it may come back, so its
    // agent's teardown finalizer stays on its VMs for it.
    await kubeNodes.create({ metadata: { name: "dying" } });
    await startAgent("live", 3);
    await startAgent("dying", 3);
    const running1 = await boundVm("d-run", "dying");
    await heldByAgent("d-run");
    const ended = await boundVm("d-done", "dying");
    const scheduled = await boundVm("d-sched", "dying");
    const onLive = await boundVm("l-run", "live");
    assert.deepEqual([running1, ended, scheduled, onLive], ["dying", "dying", "dying", "live"]);
    for (const n of ["d-run", "d-done", "l-run"]) await minted(n);
    await setPhase("d-run", { phase: "Running" });
    // Ended, but its agent died before removing the sealed material.
    await setPhase("d-done", { phase: "Succeeded", exitCode: 0 });
    await setPhase("l-run", { phase: "Running" });

    const lastRenewal = await stopAgent("dying");
    const failed = await waitFailed("d-run");
    const detectedMs = Date.now() - lastRenewal;
    assert.equal(failed.status?.reason, VM_REASONS.NodeLost);
    assert.match(failed.status?.message ?? "", /^Node dying: its agent Lease was last renewed \d+ s ago \(limit 3 s\)$/);
    assert.ok(failed.status?.phaseTimestamps?.failed);
    assert.ok(detectedMs >= LOST_AFTER_MS, `not failed before the bound (${detectedMs} ms)`);
    const failedScheduled = await waitFailed("d-sched");
    assert.equal(failedScheduled.status?.reason, VM_REASONS.NodeLost);
    console.log(`# node loss: Lease last renewed → VM Failed/NodeLost in ${detectedMs} ms (bound ${LOST_AFTER_MS} ms)`);

    await sealedGone("d-run");
    await sealedGone("d-done");
    assert.ok(hasFinalizer(await get("d-run"), FINALIZERS.vmTeardown), "a lost node whose Node is still there keeps its agent's teardown finalizer (the machine may return)");
    await waitFor("setup states Deleted", async () => ((await get("d-run")).status?.setup?.state === "Deleted" && (await get("d-done")).status?.setup?.state === "Deleted" ? true : undefined), { timeoutMs: SETTLE_MS, intervalMs: 50 });
    const done = await get("d-done");
    assert.equal(done.status?.phase, "Succeeded");
    assert.equal(done.status?.reason, undefined);
    assert.equal((await get("l-run")).status?.phase, "Running");
    assert.equal(await holdsSealed("l-run"), true, "the sealed material of a VM on a live node was removed");
    assert.equal((await get("l-run")).status?.setup?.state, "Minted");

    // The dying node now has three free slots, the live one two: new VMs go to the live one only.
    assert.equal(await boundVm("after-1"), "live");
    assert.equal(await boundVm("after-2"), "live");
    await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "after-3", namespace: NS }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral" } } as ImpVM);
    const condition = await waitFor("after-3 Unschedulable", async () => {
      const c = (await get("after-3")).status?.conditions?.find((x) => x.type === "Scheduled");
      return c?.reason === "Unschedulable" ? c : undefined;
    }, { timeoutMs: SETTLE_MS, intervalMs: 50 });
    assert.equal(condition.message, "0/2 nodes fit (VM needs 1 vCPU, 512 MiB, 1 VM slot): dying: agent Lease stale; live: not enough VM slots");
    // A NodeLost VM stays Failed: nothing binds it again.
    assert.equal((await get("d-run")).status?.phase, "Failed");
    for (const n of ["l-run", "after-1", "after-2"]) await setPhase(n, { phase: "Succeeded", exitCode: 0 });
    await vms.delete({ namespace: NS, name: "after-3" });
  });

  it("a node whose Node is Ready (its kubelet alive: the agent is restarting) is lost only after the restart grace too; once its Node turns NotReady, after the plain bound", async () => {
    const ready = (name: string, status: "True" | "False"): Promise<KubeObject> =>
      kubeNodes.patchStatus({ name }, { status: { conditions: [{ type: "Ready", status, reason: status === "True" ? "KubeletReady" : "NodeStatusUnknown", lastHeartbeatTime: new Date().toISOString(), lastTransitionTime: new Date().toISOString() }] } });
    for (const name of ["rdy-1", "rdy-2"]) {
      await kubeNodes.create({ metadata: { name } });
      await ready(name, "True");
      await startAgent(name, 1);
      assert.equal(await boundVm(`${name}-vm`, name), name);
      await heldByAgent(`${name}-vm`);
      await setPhase(`${name}-vm`, { phase: "Running" });
    }
    const stoppedBoth = await Promise.all([stopAgent("rdy-1"), stopAgent("rdy-2")]);
    // rdy-2's machine really goes: the node lifecycle controller turns its Node NotReady.
    await ready("rdy-2", "False");
    const gone = await waitFailed("rdy-2-vm");
    const goneMs = Date.now() - (stoppedBoth[1] ?? 0);
    assert.match(gone.status?.message ?? "", /last renewed \d+ s ago \(limit 3 s\)$/);
    assert.ok(goneMs < LOST_AFTER_MS + RESTART_GRACE_MS, `NotReady: lost without the grace (${goneMs} ms)`);
    const restarting = await waitFailed("rdy-1-vm");
    const restartingMs = Date.now() - (stoppedBoth[0] ?? 0);
    assert.equal(restarting.status?.reason, VM_REASONS.NodeLost);
    assert.match(restarting.status?.message ?? "", /last renewed \d+ s ago \(limit 18 s, its Node being Ready\)$/);
    assert.ok(restartingMs >= LOST_AFTER_MS + RESTART_GRACE_MS, `Ready: not lost before bound + grace (${restartingMs} ms)`);
    console.log(`# node loss: Lease stale, Node NotReady → NodeLost in ${goneMs} ms; Node Ready (agent restarting) → NodeLost in ${restartingMs} ms (bound ${LOST_AFTER_MS} + grace ${RESTART_GRACE_MS} ms)`);
  });

  it("a deleted Node fails its VMs at once; a node that never had a Node object is not affected", async () => {
    await kubeNodes.create({ metadata: { name: "kn-1" } });
    await startAgent("kn-1", 2);
    await startAgent("kn-2", 2);
    assert.equal(await boundVm("k1", "kn-1"), "kn-1");
    assert.equal(await boundVm("k2", "kn-2"), "kn-2");
    for (const n of ["k1", "k2"]) await heldByAgent(n);
    const deletedAt = Date.now();
    await kubeNodes.delete({ name: "kn-1" });
    const failed = await waitFailed("k1");
    console.log(`# node loss: Node deleted → VM Failed/NodeLost in ${Date.now() - deletedAt} ms (Lease still fresh)`);
    assert.equal(failed.status?.reason, VM_REASONS.NodeLost);
    assert.equal(failed.status?.message, "Node kn-1 was deleted");
    // Its machine is gone from the cluster: no agent will ever tear k1 down, so its finalizer comes off.
    await waitFor("k1's teardown finalizer removed", async () => (hasFinalizer(await get("k1"), FINALIZERS.vmTeardown) ? undefined : true), { timeoutMs: SETTLE_MS, intervalMs: 50 });
    // Wrongly acting on kn-2 would need its Lease to look older than the bound: let that time pass,
    // and let the node-loss controller have reconciled several more times within it.
    const from = await nodeLossReconciles();
    await waitFor("node-loss reconciles past the bound", async () => (Date.now() - deletedAt >= 2 * LOST_AFTER_MS && (await nodeLossReconciles()) >= from + 3 ? true : undefined), { timeoutMs: SETTLE_MS + 2 * LOST_AFTER_MS, intervalMs: 50 });
    assert.equal((await get("k2")).status?.phase, "Scheduled");
    assert.ok(hasFinalizer(await get("k2"), FINALIZERS.vmTeardown), "a live node's VM keeps its agent's finalizer");
    // kn-1's agent still renews its Lease, but its Node is gone: the scheduler must not bind there
    // (node loss would fail the VM at once). Pinned to kn-1, the VM says why; unpinned, it goes elsewhere.
    await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "k1-again", namespace: NS }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral", nodeName: "kn-1" } } as ImpVM);
    const why = await waitFor("k1-again Unschedulable", async () => {
      const c = (await get("k1-again")).status?.conditions?.find((x) => x.type === "Scheduled");
      return c?.reason === "Unschedulable" ? c : undefined;
    }, { timeoutMs: SETTLE_MS, intervalMs: 50 });
    assert.match(why.message ?? "", /its Node was deleted/);
    // Unpinned, kn-1 (all free, first by name) would win the tie without that rule.
    assert.notEqual(await boundVm("k-any"), "kn-1");
    await vms.delete({ namespace: NS, name: "k1-again" });
  });

  it("kubectl drain: the node records its drain, a job past its pool's grace is ended Failed/Drained, the node reports drained when its last VM ended, and uncordon forgets it", async () => {
    // A pool (nothing reconciles it here) whose drain grace is 2 s; a VM of no pool gets the default (1 h).
    await createResourceClient<ImpVMRunnerPool>(plane.kubeConfig, IMP_VM_RUNNER_POOLS).create({
      apiVersion: API_VERSION,
      kind: "ImpVMRunnerPool",
      metadata: { name: "quick", namespace: NS },
      spec: { templateName: "t", github: { credentialsSecretRef: { name: "none" }, scope: "repo", repository: "acme/api", labels: ["imp"] }, minIdle: 0, maxConcurrent: 2, scaleUpStep: 1, runnerCommand: ["/runner/run.sh"], drainGracePeriod: "2s" },
    } as ImpVMRunnerPool);
    await kubeNodes.create({ metadata: { name: "kd-1" } });
    await startAgent("kd-1", 3);
    const key = await generateNodeKeyPair(); // runner VMs go only to a node with a setup key
    await nodes.patchStatus({ name: "kd-1" }, { status: { setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: key.keyId, publicKey: key.publicKey } } });
    for (const [name, labels] of [["dr-job", { [LABELS.pool]: "quick" }], ["dr-own", {}]] as const) {
      await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: NS, labels }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral", nodeName: "kd-1" } } as ImpVM);
      await waitFor(`${name} bound`, async () => (await get(name)).status?.nodeName, { timeoutMs: 20_000, intervalMs: 25 }).catch(async (err: unknown) => Promise.reject(new Error(`${name} not bound: ${JSON.stringify((await get(name)).status)}`, { cause: err })));
      await setPhase(name, { phase: "Running" });
    }
    const annotation = async (key: string): Promise<string | undefined> => (await nodes.get({ name: "kd-1" })).metadata.annotations?.[key];
    const cordonedAt = Date.now();
    await kubeNodes.patch({ name: "kd-1" }, { spec: { unschedulable: true } } as never);
    const started = await waitFor("drain started", () => annotation(ANNOTATIONS.drainStarted), { timeoutMs: SETTLE_MS, intervalMs: 25 });
    const ended = await waitFailed("dr-job");
    const endedAfterMs = Date.now() - cordonedAt;
    assert.equal(ended.status?.reason, VM_REASONS.Drained);
    assert.match(ended.status?.message ?? "", /^Node kd-1: its node was drained and its job ran past the pool's drain grace \(2 s\)$/);
    assert.ok(Date.parse(ended.status?.phaseTimestamps?.failed ?? "") - Date.parse(started) >= 2_000, "not before the grace");
    assert.equal((await get("dr-own")).status?.phase, "Running", "a job within its grace (1 h by default) keeps running");
    assert.equal(await annotation(ANNOTATIONS.drained), undefined, "not drained while a VM runs");
    await setPhase("dr-own", { phase: "Succeeded", exitCode: 0 });
    const drained = await waitFor("drained", () => annotation(ANNOTATIONS.drained), { timeoutMs: SETTLE_MS, intervalMs: 25 });
    console.log(`# drain: cordoned → job past a 2 s grace ended in ${endedAfterMs} ms; drained at ${drained}`);
    await kubeNodes.patch({ name: "kd-1" }, { spec: { unschedulable: false } } as never);
    await waitFor("marks cleared", async () => ((await annotation(ANNOTATIONS.drainStarted)) === undefined && (await annotation(ANNOTATIONS.drained)) === undefined ? true : undefined), { timeoutMs: SETTLE_MS, intervalMs: 25 });
  });

  it("kubectl cordon: a cordoned Node takes no new VM and its VMs are not lost; uncordoned, it takes the one waiting for it at once", async () => {
    await kubeNodes.create({ metadata: { name: "kc-1" } });
    await startAgent("kc-1", 2);
    assert.equal(await boundVm("c-before", "kc-1"), "kc-1");
    await kubeNodes.patch({ name: "kc-1" }, { spec: { unschedulable: true } } as never);
    await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "c-pinned", namespace: NS }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral", nodeName: "kc-1" } } as ImpVM);
    const why = await waitFor("c-pinned Unschedulable", async () => {
      const c = (await get("c-pinned")).status?.conditions?.find((x) => x.type === "Scheduled");
      return c?.reason === "Unschedulable" ? c : undefined;
    }, { timeoutMs: SETTLE_MS, intervalMs: 50 });
    assert.match(why.message ?? "", /its Node is cordoned \(kubectl cordon\)/);
    assert.equal((await get("c-pinned")).status?.nodeName, undefined);
    assert.equal((await get("c-before")).status?.phase, "Scheduled", "a cordon is not a loss: the VM already there stays");
    // Uncordon: the scheduler hears it from the Node watch, not from its retry backoff (which has grown by now).
    const uncordonedAt = Date.now();
    await kubeNodes.patch({ name: "kc-1" }, { spec: { unschedulable: false } } as never);
    assert.equal(await waitFor("c-pinned bound", async () => (await get("c-pinned")).status?.nodeName, { timeoutMs: SETTLE_MS, intervalMs: 25 }), "kc-1");
    console.log(`# cordon: uncordoned → waiting VM bound in ${Date.now() - uncordonedAt} ms`);
  });
});
