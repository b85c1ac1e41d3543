import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { microTime } from "../../kube/index.ts";
import { FakeClock } from "../../shared/index.ts";
import { decideNodeLoss, type NodeLossInput } from "./decide-node-loss.ts";

const clock = new FakeClock();
const renewedAt = clock.now();
const base: NodeLossInput = {
  nodeName: "n1",
  lease: { spec: { holderIdentity: "n1", leaseDurationSeconds: 40, renewTime: microTime(renewedAt) } },
  leaseMissingSinceMs: undefined,
  kubeNode: "unwatched",
  nowMs: renewedAt,
  watchingSinceMs: renewedAt - 3_600_000,
  lostAfterMs: 40_000,
  kubeNodeReady: false,
  agentRestartGraceMs: 180_000,
};

describe("decideNodeLoss", () => {
  it("a renewed Lease keeps the node until lostAfterMs past renewTime, and says when to look again", async () => {
    assert.deepEqual(decideNodeLoss(base), { lost: false, recheckInMs: 40_000 });
    await clock.advance(39_999);
    assert.deepEqual(decideNodeLoss({ ...base, nowMs: clock.now() }), { lost: false, recheckInMs: 1 });
    await clock.advance(1);
    const d = decideNodeLoss({ ...base, nowMs: clock.now() });
    assert.equal(d.lost, true);
    assert.match(d.lost ? d.message : "", /^Node n1: its agent Lease was last renewed 40 s ago \(limit 40 s\)$/);
  });

  it("a process that began watching after the last renewal gives the node the full bound from then (an operator restarted after an API server outage)", () => {
    // Renewed 60 s ago, before an outage no agent could renew through; the operator restarted 5 s ago.
    const now = renewedAt + 60_000;
    assert.deepEqual(decideNodeLoss({ ...base, nowMs: now, watchingSinceMs: now - 5_000 }), { lost: false, recheckInMs: 35_000 });
    const later = decideNodeLoss({ ...base, nowMs: now + 35_000, watchingSinceMs: now - 5_000 });
    assert.equal(later.lost, true);
    assert.match(later.lost ? later.message : "", /last renewed 95 s ago/);
  });

  it("a missing Lease is lost only after lostAfterMs of being missing as observed", () => {
    const now = clock.now();
    assert.deepEqual(decideNodeLoss({ ...base, lease: undefined, leaseMissingSinceMs: now, nowMs: now + 10_000 }), { lost: false, recheckInMs: 30_000 });
    assert.equal(decideNodeLoss({ ...base, lease: undefined, leaseMissingSinceMs: now, nowMs: now + 40_000 }).lost, true);
  });

  it("a deleted Node is lost at once; a Node never seen or not watched says nothing", () => {
    assert.deepEqual(decideNodeLoss({ ...base, kubeNode: "deleted" }), { lost: true, message: "Node n1 was deleted", machineGone: true });
    assert.equal(decideNodeLoss({ ...base, kubeNode: "never" }).lost, false);
    assert.equal(decideNodeLoss({ ...base, kubeNode: "present" }).lost, false);
  });

  it("a lost node's machine is gone when it has no Node (deleted, or never there once Nodes are listed); present or unwatched, it may come back", () => {
    const stale = { ...base, nowMs: renewedAt + 40_000 };
    const gone = (kubeNode: NodeLossInput["kubeNode"]): boolean | undefined => {
      const d = decideNodeLoss({ ...stale, kubeNode });
      return d.lost ? d.machineGone : undefined;
    };
    assert.equal(gone("never"), true, "an operator restarted after the Node's deletion never saw it");
    assert.equal(gone("present"), false, "a silent agent on a machine still in the cluster may return");
    assert.equal(gone("unwatched"), false);
    const missing = decideNodeLoss({ ...base, kubeNode: "never", lease: undefined, leaseMissingSinceMs: renewedAt, nowMs: renewedAt + 40_000 });
    assert.equal(missing.lost && missing.machineGone, true);
  });

  it("a node whose Node is Ready (kubelet alive, agent restarting) gets the restart grace on top; NotReady, the plain bound again", () => {
    const now = renewedAt + 65_000; // an agent Pod that took 65 s to start on a starved machine
    assert.equal(decideNodeLoss({ ...base, nowMs: now, kubeNode: "present" }).lost, true);
    assert.deepEqual(decideNodeLoss({ ...base, nowMs: now, kubeNode: "present", kubeNodeReady: true }), { lost: false, recheckInMs: 155_000 });
    const late = decideNodeLoss({ ...base, nowMs: renewedAt + 220_000, kubeNode: "present", kubeNodeReady: true });
    assert.equal(late.lost, true);
    assert.match(late.lost ? late.message : "", /last renewed 220 s ago \(limit 220 s, its Node being Ready\)/);
    const missing = decideNodeLoss({ ...base, lease: undefined, leaseMissingSinceMs: renewedAt, nowMs: renewedAt + 100_000, kubeNode: "present", kubeNodeReady: true });
    assert.deepEqual(missing, { lost: false, recheckInMs: 120_000 });
  });

  it("a Lease without renewTime is lost", () => {
    assert.equal(decideNodeLoss({ ...base, lease: { spec: { holderIdentity: "n1" } } }).lost, true);
  });
});
