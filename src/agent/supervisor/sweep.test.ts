import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { decideSweep, type SupervisionInventory } from "./sweep.ts";
import type { SupervisorIdentity } from "./records.ts";

const identity = (vmId: string, n: number): SupervisorIdentity => ({
  version: 1, name: "vmm", vmId, bootId: "b", supervisor: { pid: n, startTime: 1 }, process: { pid: n + 1, startTime: 2 },
  socket: `/s/${vmId}/sock`, startedAt: "t",
});

describe("decideSweep", () => {
  const inventory: SupervisionInventory = {
    entries: [
      { dir: "/s/live", vmId: "live", identity: identity("live", 10), supervisor: "alive", process: "alive" },
      { dir: "/s/orphan", vmId: "orphan", identity: identity("orphan", 20), supervisor: "alive", process: "alive" },
      { dir: "/s/exited", vmId: "exited", identity: identity("exited", 30), supervisor: "gone", process: "gone" },
      { dir: "/s/reused", vmId: "reused", identity: identity("reused", 40), supervisor: "reused", process: "reused" },
      { dir: "/s/nameless", vmId: undefined, supervisor: "unknown", process: "unknown" },
    ],
    cgroups: [
      { vmId: "live", name: "vmm", path: "/cg/imp/live/vmm", groupPath: "/cg/imp/live", pids: [11] },
      { vmId: "orphan", name: "vmm", path: "/cg/imp/orphan/vmm", groupPath: "/cg/imp/orphan", pids: [21] },
      { vmId: "stray", name: "vmm", path: "/cg/imp/stray/vmm", groupPath: "/cg/imp/stray", pids: [99] },
    ],
    emptyCgroupGroups: [{ vmId: "empty", path: "/cg/imp/empty" }, { vmId: "live", path: "/cg/imp/live2" }],
  };
  const plan = decideSweep(inventory, new Set(["live"]));

  it("kills only live processes and supervisors of VMs that are not live, never a reused pid", () => {
    assert.deepEqual(plan.processes, [{ pid: 21, startTime: 2 }]);
    assert.deepEqual(plan.supervisors, [{ pid: 20, startTime: 1 }]);
  });
  it("removes the cgroups and directories of every VM that is not live, and leaves the live one", () => {
    assert.deepEqual(plan.cgroups.map((c) => c.path), ["/cg/imp/orphan/vmm", "/cg/imp/stray/vmm"]);
    assert.deepEqual(plan.cgroupGroups, ["/cg/imp/empty", "/cg/imp/orphan", "/cg/imp/stray"]);
    assert.deepEqual(plan.dirs, ["/s/orphan", "/s/exited", "/s/reused"]);
  });
  it("reports a directory that names no VM instead of removing it", () => {
    assert.deepEqual(plan.unknown, ["/s/nameless"]);
  });
  it("removes nothing when every VM is live", () => {
    const none = decideSweep(inventory, new Set(["live", "orphan", "exited", "reused", "stray", "empty"]));
    assert.deepEqual([none.processes, none.supervisors, none.cgroups, none.cgroupGroups, none.dirs], [[], [], [], [], []]);
  });
});
