import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Registry } from "prom-client";
import type { ImpVM } from "../api/index.ts";
import { FakeClock } from "../shared/index.ts";
import { FLEET_METRICS, registerFleetMetrics } from "./fleet-metrics.ts";

const vm = (name: string, node: string | undefined, deletedAt?: string): ImpVM =>
  ({ metadata: { name, namespace: "ci", ...(deletedAt === undefined ? {} : { deletionTimestamp: deletedAt }) }, ...(node === undefined ? {} : { status: { nodeName: node } }) }) as ImpVM;

async function values(registry: Registry, name: string): Promise<Array<{ labels: Record<string, string | number | undefined>; value: number }>> {
  return ((await registry.getSingleMetric(name)?.get())?.values ?? []).map((v) => ({ labels: { ...v.labels }, value: v.value }));
}

describe("fleet metrics", () => {
  it("read the fleet at each scrape: the leader, the oldest deleting VM per node, each listener's session", async () => {
    const clock = new FakeClock(Date.parse("2026-12-06T10:00:00Z"));
    const registry = new Registry();
    let leading = false;
    let vms: ImpVM[] = [vm("a-1", "node-a", "2026-12-06T09:50:00Z"), vm("a-2", "node-a", "2026-12-06T09:59:00Z"), vm("b-1", "node-b"), vm("p-1", undefined, "2026-12-06T09:59:30Z")];
    let sessions: Array<readonly [string, boolean]> = [["ci/linux", true], ["ci/docker", false]];
    registerFleetMetrics({ registry, clock, isLeader: () => leading, vmCache: { list: () => vms }, scaleSetSessions: () => sessions, scaleSetJobsWaiting: () => [] });

    assert.deepEqual(await values(registry, FLEET_METRICS.leader), [{ labels: {}, value: 0 }]);
    leading = true;
    assert.deepEqual(await values(registry, FLEET_METRICS.leader), [{ labels: {}, value: 1 }]);
    // node-a: the older of its two deleting VMs (10 min); node-b has none deleting; "" for one never bound.
    assert.deepEqual(await values(registry, FLEET_METRICS.deletingAge), [{ labels: { node: "node-a" }, value: 600 }, { labels: { node: "" }, value: 30 }]);
    await clock.advance(60_000);
    assert.deepEqual((await values(registry, FLEET_METRICS.deletingAge))[0], { labels: { node: "node-a" }, value: 660 }, "a VM stuck terminating keeps it growing");
    vms = [vm("b-1", "node-b")];
    assert.deepEqual(await values(registry, FLEET_METRICS.deletingAge), [], "gone once nothing is deleting (no stale series)");
    assert.deepEqual(await values(registry, FLEET_METRICS.scaleSetSession), [{ labels: { namespace: "ci", name: "linux" }, value: 1 }, { labels: { namespace: "ci", name: "docker" }, value: 0 }]);
    sessions = [];
    assert.deepEqual(await values(registry, FLEET_METRICS.scaleSetSession), [], "a pool whose listener stopped has no series");
    // Registered again (an operator restarted in the same process): one of each, not an error.
    registerFleetMetrics({ registry, clock, isLeader: () => false, vmCache: { list: () => [] }, scaleSetSessions: () => [], scaleSetJobsWaiting: () => [] });
    assert.deepEqual(await values(registry, FLEET_METRICS.leader), [{ labels: {}, value: 0 }]);
  });

  it("count each pool's VMs the scheduler finds no room for, and only those", async () => {
    const registry = new Registry();
    const unschedulable = { type: "Scheduled", status: "False", reason: "Unschedulable", message: "no node has 4 vCPU free" };
    const pending = (name: string, pool: string, extra: Record<string, unknown> = {}): ImpVM =>
      ({ metadata: { name, namespace: "ci", labels: { "imp.dev/pool": pool }, ownerReferences: [{ kind: "ImpVMRunnerPool", name: pool }] }, status: { phase: "Pending", conditions: [unschedulable] }, ...extra }) as unknown as ImpVM;
    let vms: ImpVM[] = [
      pending("big-1", "big"),
      pending("big-2", "big"),
      pending("small-1", "small"),
      pending("big-3", "big", { status: { phase: "Pending" } }), // not judged yet
      pending("big-4", "big", { status: { phase: "Pending", nodeName: "node-a", conditions: [unschedulable] } }), // placed since
      pending("big-5", "big", { metadata: { name: "big-5", namespace: "ci", labels: { "imp.dev/pool": "big" }, deletionTimestamp: "2026-12-06T09:59:00Z" } }),
      ({ metadata: { name: "lone", namespace: "ci" }, status: { phase: "Pending", conditions: [unschedulable] } }) as unknown as ImpVM, // no pool
      ({ metadata: { name: "big-9", namespace: "ci", labels: { "imp.dev/pool": "big" } }, status: { phase: "Pending", conditions: [unschedulable] } }) as unknown as ImpVM, // labelled, owned by no pool
    ];
    let leading = false;
    registerFleetMetrics({ registry, clock: new FakeClock(), isLeader: () => leading, vmCache: { list: () => vms }, scaleSetSessions: () => [], scaleSetJobsWaiting: () => [] });
    assert.deepEqual(await values(registry, FLEET_METRICS.waitingForCapacity), [], "a standby reports nothing: a sum over replicas would double it");
    leading = true;
    assert.deepEqual(await values(registry, FLEET_METRICS.waitingForCapacity), [{ labels: { namespace: "ci", pool: "big" }, value: 2 }, { labels: { namespace: "ci", pool: "small" }, value: 1 }]);
    vms = [];
    assert.deepEqual(await values(registry, FLEET_METRICS.waitingForCapacity), [], "no stale series once placed");
  });

  it("count the jobs each scale-set pool leaves on GitHub for want of node capacity, on the leader only", async () => {
    const registry = new Registry();
    let leading = false;
    let waiting: Array<readonly [string, number]> = [["ci/linux", 7], ["ci/docker", 0]];
    registerFleetMetrics({ registry, clock: new FakeClock(), isLeader: () => leading, vmCache: { list: () => [] }, scaleSetSessions: () => [], scaleSetJobsWaiting: () => waiting });
    assert.deepEqual(await values(registry, FLEET_METRICS.jobsWaitingForCapacity), [], "a standby reports nothing");
    leading = true;
    assert.deepEqual(await values(registry, FLEET_METRICS.jobsWaitingForCapacity), [{ labels: { namespace: "ci", pool: "linux" }, value: 7 }, { labels: { namespace: "ci", pool: "docker" }, value: 0 }]);
    waiting = [];
    assert.deepEqual(await values(registry, FLEET_METRICS.jobsWaitingForCapacity), [], "a pool whose listener stopped has no series");
  });
});
