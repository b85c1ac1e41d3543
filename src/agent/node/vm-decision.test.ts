import { test } from "node:test";
import assert from "node:assert/strict";
import { FINALIZERS, type ImpVM, type ImpVMStatus } from "../../api/index.ts";
import { FakeClock } from "../../shared/index.ts";
import { AGENT_TABLE, apiSituation, decideVm, type AgentAction } from "./vm-decision.ts";
import { newLocalVm, type LocalVm } from "../vm/index.ts";

const clock = new FakeClock(Date.parse("2026-12-02T10:00:00Z"));
const t0 = clock.now();
const setupWaitMs = 300_000;

function vm(status: ImpVMStatus = { phase: "Scheduled", nodeName: "n1" }, meta: Partial<ImpVM["metadata"]> = {}, expireAfter?: string): ImpVM {
  return {
    apiVersion: "imp.dev/v1alpha1",
    kind: "ImpVM",
    metadata: { name: "pool-abcde", namespace: "ci", uid: "uid-1", creationTimestamp: new Date(t0).toISOString(), finalizers: [FINALIZERS.vmTeardown], ...meta },
    spec: expireAfter === undefined
      ? { templateRef: { name: "t" }, lifecycle: "ephemeral" }
      : { template: { classRef: { name: "c" }, image: "r/i:1", kernel: "default", expireAfter }, workload: { command: ["true"] }, lifecycle: "ephemeral" },
    status,
  } as ImpVM;
}

const local = (patch: Partial<LocalVm>): LocalVm => ({ ...newLocalVm("uid-1"), ...patch });
const types = (actions: readonly AgentAction[]): string[] => actions.map((a) => a.type);
const patchOf = (actions: readonly AgentAction[]): ImpVMStatus => {
  const p = actions.find((a) => a.type === "PatchStatus");
  assert.ok(p !== undefined && p.type === "PatchStatus", `no PatchStatus in ${types(actions).join(",")}`);
  return p.status;
};

test("a VM bound here gets the finalizer first, then is started", () => {
  assert.deepEqual(types(decideVm({ vm: vm(undefined, { finalizers: [] }), local: undefined, nowMs: t0, setupWaitMs }).actions), ["AddFinalizer"]);
  assert.deepEqual(types(decideVm({ vm: vm(), local: undefined, nowMs: t0, setupWaitMs }).actions), ["Start"]);
});

test("local progress becomes Preparing, Booting (with prepare duration), Running, with timestamps", () => {
  const preparing = patchOf(decideVm({ vm: vm(), local: local({ at: { preparing: t0 } }), nowMs: t0, setupWaitMs }).actions);
  assert.equal(preparing.phase, "Preparing");
  assert.equal(preparing.phaseTimestamps?.preparing, new Date(t0).toISOString());

  const booting = patchOf(decideVm({ vm: vm({ ...preparing }), local: local({ step: "booting", vmm: "qemu", at: { preparing: t0, booting: t0 + 420 } }), nowMs: t0 + 500, setupWaitMs }).actions);
  assert.equal(booting.phase, "Booting");
  assert.equal(booting.prepareDurationMs, 420);
  assert.equal(booting.vmm, "qemu");

  const running = patchOf(decideVm({ vm: vm(booting), local: local({ stage: "running", at: { preparing: t0, booting: t0 + 420, guestReady: t0 + 3420, running: t0 + 3500 } }), nowMs: t0 + 4000, setupWaitMs }).actions);
  assert.equal(running.phase, "Running");
  assert.equal(running.bootDurationMs, 3000);
  assert.equal(running.phaseTimestamps?.preparing, preparing.phaseTimestamps?.preparing, "earlier stamps are kept");
});

test("nothing is written when the API already says everything local knows", () => {
  const l = local({ at: { preparing: t0 } });
  const first = patchOf(decideVm({ vm: vm(), local: l, nowMs: t0, setupWaitMs }).actions);
  assert.deepEqual(decideVm({ vm: vm(first), local: l, nowMs: t0 + 1, setupWaitMs }).actions, []);
});

test("the phase never moves backwards: a local stage behind the API changes no phase", () => {
  const d = decideVm({ vm: vm({ phase: "Running", nodeName: "n1", phaseTimestamps: { running: new Date(t0).toISOString() } }), local: local({ step: "preparing", at: {} }), nowMs: t0, setupWaitMs });
  assert.deepEqual(d.actions, []);
});

test("an ended workload becomes Succeeded or Failed with its code, then the node resources are released", () => {
  const ok = decideVm({ vm: vm({ phase: "Running", nodeName: "n1" }), local: local({ stage: "ended", outcome: { succeeded: true, reason: "Completed", message: "exit 0", exitCode: 0 }, at: { ended: t0 } }), nowMs: t0, setupWaitMs });
  const st = patchOf(ok.actions);
  assert.equal(st.phase, "Succeeded");
  assert.equal(st.exitCode, 0);
  assert.equal(st.reason, "Completed");
  assert.equal(st.phaseTimestamps?.succeeded, new Date(t0).toISOString());
  // Once the API says Succeeded, the terminal row releases.
  const after = decideVm({ vm: vm(st), local: local({ stage: "ended", outcome: { succeeded: true, reason: "Completed", message: "exit 0", exitCode: 0 }, at: { ended: t0 } }), nowMs: t0, setupWaitMs });
  assert.deepEqual(types(after.actions), ["Release"]);

  const bad = patchOf(decideVm({ vm: vm({ phase: "Running", nodeName: "n1" }), local: local({ stage: "ended", outcome: { succeeded: false, reason: "ExitNonZero", message: "exit 3", exitCode: 3 }, at: { ended: t0 } }), nowMs: t0, setupWaitMs }).actions);
  assert.equal(bad.phase, "Failed");
  assert.equal(bad.exitCode, 3);
});

test("released: teardown is recorded and the finalizer removed; without the finalizer only the record", () => {
  const released = local({ stage: "released", outcome: { succeeded: true, reason: "Completed", message: "", exitCode: 0 }, processGone: true, resourcesReleased: true, at: { ended: t0, released: t0 + 80 } });
  const d = decideVm({ vm: vm({ phase: "Succeeded", nodeName: "n1", exitCode: 0 }), local: released, nowMs: t0 + 100, setupWaitMs });
  assert.deepEqual(types(d.actions), ["PatchStatus", "RemoveFinalizer"]);
  assert.deepEqual(patchOf(d.actions).teardown, { processGone: true, resourcesReleased: true, completedAt: new Date(t0 + 80).toISOString() });
  const gone = decideVm({ vm: undefined, local: released, nowMs: t0, setupWaitMs });
  assert.deepEqual(types(gone.actions), ["Forget"]);
});

test("deleting in any live stage stops the VM; a deleting VM unknown here is released (files of an earlier run)", () => {
  const deleting = { deletionTimestamp: new Date(t0).toISOString() };
  for (const l of [local({ step: "preparing" }), local({ step: "booting" }), local({ stage: "running" })]) {
    const d = decideVm({ vm: vm({ phase: "Booting", nodeName: "n1" }, deleting), local: l, nowMs: t0, setupWaitMs });
    assert.deepEqual(d.actions, [{ type: "Stop", reason: "Deleted", message: "the ImpVM is being deleted" }]);
  }
  assert.deepEqual(types(decideVm({ vm: vm({ phase: "Running", nodeName: "n1" }, deleting), local: undefined, nowMs: t0, setupWaitMs }).actions), ["Release"]);
  assert.deepEqual(decideVm({ vm: vm({ phase: "Running", nodeName: "n1" }, deleting), local: local({ stage: "stopping" }), nowMs: t0, setupWaitMs }).actions, []);
});

test("a VM another component made terminal (NodeLost) is stopped here too", () => {
  const d = decideVm({ vm: vm({ phase: "Failed", nodeName: "n1", reason: "NodeLost" }), local: local({ stage: "running" }), nowMs: t0, setupWaitMs });
  assert.deepEqual(d.actions, [{ type: "Stop", reason: "NodeLost", message: "the ImpVM was marked terminal by another component" }]);
});

test("after an agent restart, an active VM with no local record and no VMM is failed, never booted again", () => {
  const d = decideVm({ vm: vm({ phase: "Running", nodeName: "n1" }), local: undefined, nowMs: t0, setupWaitMs });
  assert.deepEqual(types(d.actions), ["PatchStatus", "Release"]);
  assert.equal(patchOf(d.actions).phase, "Failed");
  assert.equal(patchOf(d.actions).reason, "VmmExited");
});

test("setup handoff: sent is recorded as Sent, delivery as Delivered with its time; states never move back", () => {
  const minted = { phase: "Booting" as const, nodeName: "n1", setup: { state: "Minted" as const, secretName: "pool-abcde-setup" } };
  const sent = patchOf(decideVm({ vm: vm(minted), local: local({ step: "delivering", setup: "sent", at: { booting: t0 } }), nowMs: t0, setupWaitMs }).actions);
  assert.equal(sent.setup?.state, "Sent");
  const delivered = patchOf(decideVm({ vm: vm({ ...minted, ...sent }), local: local({ stage: "running", setup: "delivered", at: { booting: t0, running: t0 + 5, delivered: t0 + 5 } }), nowMs: t0 + 5, setupWaitMs }).actions);
  assert.equal(delivered.setup?.state, "Delivered");
  assert.equal(delivered.setup?.deliveredAt, new Date(t0 + 5).toISOString());
  const later = decideVm({ vm: vm({ ...minted, ...delivered, setup: { ...delivered.setup!, state: "Deleted" } }), local: local({ stage: "running", setup: "delivered", at: { booting: t0, running: t0 + 5, delivered: t0 + 5 } }), nowMs: t0 + 6, setupWaitMs });
  assert.deepEqual(later.actions, [], "Deleted is never overwritten");
});

test("expireAfter: a live VM is requeued for its expiry and stopped once it passed", () => {
  const running = vm({ phase: "Running", nodeName: "n1" }, {}, "10m");
  const before = decideVm({ vm: running, local: local({ stage: "running" }), nowMs: t0 + 60_000, setupWaitMs });
  assert.equal(before.requeueAfterMs, 9 * 60_000);
  const after = decideVm({ vm: running, local: local({ stage: "running" }), nowMs: t0 + 10 * 60_000, setupWaitMs });
  assert.deepEqual(after.actions.at(-1), { type: "Stop", reason: "Expired", message: "expireAfter passed" });
});

test("every cell of the table answers for every situation", () => {
  const samples: Record<string, ImpVM | undefined> = {
    gone: undefined,
    deleting: vm({ phase: "Running", nodeName: "n1" }, { deletionTimestamp: new Date(t0).toISOString() }),
    terminal: vm({ phase: "Failed", nodeName: "n1" }),
    scheduled: vm(),
    active: vm({ phase: "Booting", nodeName: "n1" }),
  };
  for (const [situation, row] of Object.entries(AGENT_TABLE)) {
    assert.equal(apiSituation(samples[situation]), situation);
    for (const [stage, cell] of Object.entries(row)) {
      const l = stage === "absent" ? undefined : local({ stage: stage as LocalVm["stage"], outcome: { succeeded: false, reason: "VmmExited", message: "x" } });
      assert.doesNotThrow(() => cell({ vm: samples[situation], local: l, nowMs: t0, setupWaitMs }), `${situation}/${stage}`);
    }
  }
});

test("a VM awaiting its setup is handed it once minted, and never when it was sent before or failed", () => {
  const awaiting = local({ stage: "awaiting-setup", step: "booting", vmm: "qemu", at: { preparing: t0, booting: t0 + 100, guestReady: t0 + 1500, awaitingSetup: t0 + 1600 } });
  const booting = (setup?: NonNullable<ImpVMStatus["setup"]>["state"]): ImpVM =>
    vm({ phase: "Booting", nodeName: "n1", vmm: "qemu", prepareDurationMs: 100, bootDurationMs: 1400, phaseTimestamps: { preparing: new Date(t0).toISOString(), booting: new Date(t0 + 100).toISOString() }, ...(setup === undefined ? {} : { setup: { state: setup } }) });
  const cases: readonly { readonly setup: NonNullable<ImpVMStatus["setup"]>["state"] | undefined; readonly at: number; readonly want: readonly string[]; readonly reason?: string }[] = [
    { setup: "Minted", at: t0 + 2_000, want: ["DeliverSetup"] },
    { setup: undefined, at: t0 + 2_000, want: [] },
    { setup: "Pending", at: t0 + 2_000, want: [] },
    { setup: undefined, at: t0 + 1_600 + setupWaitMs, want: ["Stop"], reason: "SetupFailed" },
    { setup: "Sent", at: t0 + 2_000, want: ["Stop"], reason: "SetupFailed" },
    { setup: "Delivered", at: t0 + 2_000, want: ["Stop"], reason: "SetupFailed" },
    { setup: "Failed", at: t0 + 2_000, want: ["Stop"], reason: "SetupFailed" },
    { setup: "Deleted", at: t0 + 2_000, want: ["Stop"], reason: "SetupFailed" },
  ];
  for (const c of cases) {
    const d = decideVm({ vm: booting(c.setup), local: awaiting, nowMs: c.at, setupWaitMs });
    assert.deepEqual(types(d.actions).filter((t) => t !== "PatchStatus"), c.want, `setup ${c.setup ?? "absent"} at +${c.at - t0} ms`);
    const stopAction = d.actions.find((a) => a.type === "Stop");
    if (c.reason !== undefined) assert.equal(stopAction?.type === "Stop" ? stopAction.reason : undefined, c.reason);
  }
  // Not minted yet: look again exactly when the wait runs out, not before.
  assert.equal(decideVm({ vm: booting(), local: awaiting, nowMs: t0 + 2_000, setupWaitMs }).requeueAfterMs, t0 + 1_600 + setupWaitMs - (t0 + 2_000));
  // Awaiting the setup is still Booting in the API.
  assert.equal(patchOf(decideVm({ vm: vm({ phase: "Preparing", nodeName: "n1" }), local: awaiting, nowMs: t0 + 2_000, setupWaitMs }).actions).phase, "Booting");
});

test("a VM awaiting its setup is stopped when deleted, when another component ended it, and when it expires", () => {
  const awaiting = local({ stage: "awaiting-setup", at: { awaitingSetup: t0 } });
  const stopReason = (v: ImpVM | undefined): string | undefined => {
    const s = decideVm({ vm: v, local: awaiting, nowMs: t0 + 1, setupWaitMs }).actions.find((a) => a.type === "Stop");
    return s?.type === "Stop" ? s.reason : undefined;
  };
  assert.equal(stopReason(undefined), "Deleted");
  assert.equal(stopReason(vm({ phase: "Booting", nodeName: "n1" }, { deletionTimestamp: new Date(t0).toISOString() })), "Deleted");
  assert.equal(stopReason(vm({ phase: "Failed", nodeName: "n1", reason: "NodeLost" })), "NodeLost");
  const expired = decideVm({ vm: vm({ phase: "Booting", nodeName: "n1" }, {}, "1m"), local: awaiting, nowMs: t0 + 61_000, setupWaitMs });
  assert.deepEqual(expired.actions.at(-1), { type: "Stop", reason: "Expired", message: "expireAfter passed" });
});
