import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ANNOTATIONS, API_VERSION, FINALIZERS, IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, LABELS, type ImpNode, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import { FakeResourceClient, LEASE_RESOURCE, type Lease } from "../../kube/index.ts";
import { FakeClock, ImpError, silentLogger } from "../../shared/index.ts";
import { decommission, type DecommissionOptions } from "./decommission.ts";

async function world() {
  const clock = new FakeClock(Date.parse("2026-12-05T12:00:00.250Z"));
  const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS, { clock });
  const vms = new FakeResourceClient<ImpVM>(IMP_VMS, { clock });
  const nodes = new FakeResourceClient<ImpNode>(IMP_NODES, { clock });
  const leases = new FakeResourceClient<Lease>(LEASE_RESOURCE, { clock });
  await pools.create({ apiVersion: API_VERSION, kind: "ImpVMRunnerPool", metadata: { name: "p", namespace: "ci" } } as ImpVMRunnerPool);
  // A VM whose teardown the agent still holds (a finalizer), and one without.
  await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "p-1", namespace: "ci", finalizers: [FINALIZERS.vmTeardown] } } as ImpVM);
  await vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "standalone", namespace: "ci" } } as ImpVM);
  for (const name of ["live", "dead"]) {
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name }, spec: { unschedulable: false } } as ImpNode);
    await leases.create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: `imp-agent-${name}`, namespace: "imp", labels: { [LABELS.managedBy]: "imp-agent" } } } as Lease);
  }
  await leases.create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: "imp-operator", namespace: "imp" } } as Lease);
  const options = (over: Partial<DecommissionOptions> = {}): DecommissionOptions => ({ pools, vms, nodes, leases, leaseNamespace: "imp", keepNodeState: false, vmTimeoutMs: 60_000, nodeTimeoutMs: 30_000, pollIntervalMs: 1_000, clock, logger: silentLogger, ...over });
  return { clock, pools, vms, nodes, leases, options };
}

/** Moves the fake clock a poll interval at a time until `p` settles (bounded). */
async function drive<T>(clock: FakeClock, p: Promise<T>, onTick: () => Promise<void> = async () => undefined): Promise<T> {
  let settled = false;
  const done = p.finally(() => {
    settled = true;
  });
  for (let i = 0; i < 1_000 && !settled; i++) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    await onTick();
    await clock.advance(1_000);
  }
  return done;
}

describe("decommission (the chart's pre-delete hook)", () => {
  it("deletes every pool and VM, waits for them to go, then has each live agent retire its node and removes what a dead one left", async () => {
    const { clock, pools, vms, nodes, leases, options } = await world();
    let annotated: Record<string, string> | undefined;
    const report = await drive(clock, decommission(options()), async () => {
      // The agent of node "live": its VM's teardown ends after a while; once asked, it retires its node.
      const vm = (await vms.list()).items.find((v) => v.metadata.name === "p-1");
      if (vm !== undefined && clock.now() >= Date.parse("2026-12-05T12:00:05Z")) await vms.patch({ namespace: "ci", name: "p-1" }, { metadata: { finalizers: null } });
      const live = (await nodes.list()).items.find((n) => n.metadata.name === "live");
      if (live?.metadata.annotations?.[ANNOTATIONS.decommission] !== undefined) {
        annotated = { ...live.metadata.annotations };
        await leases.delete({ namespace: "imp", name: "imp-agent-live" });
        await nodes.delete({ name: "live" });
      }
    });
    const askedAt = annotated?.[ANNOTATIONS.decommission] ?? "";
    assert.deepEqual(Object.keys(annotated ?? {}), [ANNOTATIONS.decommission], "asked without keep-state");
    assert.match(askedAt, /^2026-12-05T12:00:\d\dZ$/, "in whole seconds");
    assert.ok(Date.parse(askedAt) >= Date.parse("2026-12-05T12:00:05Z"), `asked only once the VMs were gone (${askedAt})`);
    assert.deepEqual({ ...report, vmsGoneMs: undefined, nodesGoneMs: undefined }, { poolsDeleted: 1, vmsDeleted: 2, nodesRetired: ["live"], nodesForced: ["dead"], vmsGoneMs: undefined, nodesGoneMs: undefined });
    assert.ok(report.vmsGoneMs >= 4_000 && report.nodesGoneMs >= 30_000, `waited for the VM's teardown (${report.vmsGoneMs} ms) and the dead node's agent until its timeout (${report.nodesGoneMs} ms)`);
    assert.deepEqual([(await pools.list()).items, (await vms.list()).items, (await nodes.list()).items], [[], [], []]);
    assert.deepEqual((await leases.list()).items.map((l) => l.metadata.name), ["imp-operator"], "the agents' Leases are gone; other Leases stay");
  });

  it("asks agents to keep their state when told to", async () => {
    const { clock, nodes, options } = await world();
    await nodes.delete({ name: "dead" });
    let keep: string | undefined;
    await drive(clock, decommission(options({ keepNodeState: true, vmTimeoutMs: 1_000 })), async () => {
      for (const vm of ["p-1"]) await options().vms.patch({ namespace: "ci", name: vm }, { metadata: { finalizers: null } }).catch(() => undefined);
      const live = (await nodes.list()).items[0];
      keep ??= live?.metadata.annotations?.[ANNOTATIONS.decommissionKeepState];
      if (keep !== undefined) await nodes.delete({ name: "live" }).catch(() => undefined);
    });
    assert.equal(keep, "true");
  });

  it("fails, naming what is left, when VMs outlast the timeout, and asks no node to retire", async () => {
    const { clock, nodes, options } = await world();
    const err = await drive(clock, decommission(options({ vmTimeoutMs: 10_000 })).then(() => undefined, (e: unknown) => e));
    assert.ok(err instanceof ImpError && err.code === "DecommissionTimedOut", String(err));
    assert.match(err.message, /ImpVM ci\/p-1 \(no phase\)/);
    assert.doesNotMatch(err.message, /standalone/, "the VM without a finalizer went at once");
    assert.deepEqual((await nodes.list()).items.map((n) => n.metadata.annotations?.[ANNOTATIONS.decommission]), [undefined, undefined], "no node was asked to retire while VMs remain");
  });
});
