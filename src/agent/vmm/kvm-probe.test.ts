import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { decideAccel, type KvmFacts } from "./kvm-probe.ts";

const healthy: KvmFacts = { deviceExists: true, deviceOpenable: true, pvm: false, qemu: { outcome: "ready", ms: 42 } };
const msrAbort = { outcome: "exited", ms: 40, detail: "signal SIGABRT: qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" } as const;

describe("decideAccel()", () => {
  it("uses KVM when the device opens, it is not PVM's and QEMU created a KVM machine", () => {
    const d = decideAccel(healthy, "auto");
    assert.deepEqual({ kvm: d.kvm, accel: d.accel, deviceExists: d.deviceExists, pvm: d.pvm }, { kvm: true, accel: "kvm", deviceExists: true, pvm: false });
    assert.match(d.reason, /KVM usable: QEMU created a KVM machine with -cpu host in 42 ms/);
  });

  it("falls back to TCG without /dev/kvm", () => {
    const d = decideAccel({ deviceExists: false, deviceOpenable: false, pvm: false, qemu: { outcome: "not-run", detail: "x" } }, "auto");
    assert.equal(d.kvm, false);
    assert.equal(d.accel, "tcg");
    assert.equal(d.deviceExists, false);
    assert.match(d.reason, /^TCG \(software emulation\): \/dev\/kvm does not exist$/);
  });

  it("falls back to TCG when /dev/kvm exists but cannot be opened read-write", () => {
    const d = decideAccel({ deviceExists: true, deviceOpenable: false, deviceError: "EACCES: permission denied", pvm: false, qemu: { outcome: "not-run", detail: "x" } }, "auto");
    assert.deepEqual([d.kvm, d.accel, d.deviceExists], [false, "tcg", true]);
    assert.match(d.reason, /cannot be opened read-write \(EACCES: permission denied\)/);
  });

  it("does not count a PVM /dev/kvm as usable even if QEMU could create the machine", () => {
    for (const qemu of [msrAbort, { outcome: "ready", ms: 30 } as const]) {
      const d = decideAccel({ ...healthy, pvm: true, qemu }, "auto");
      assert.deepEqual([d.kvm, d.accel, d.pvm], [false, "tcg", true]);
      assert.match(d.reason, /kvm_pvm/);
    }
    assert.match(decideAccel({ ...healthy, pvm: true, qemu: msrAbort }, "auto").reason, /failed to set MSR 0x10a/);
  });

  it("falls back to TCG when QEMU aborts or does not answer on a plain KVM device", () => {
    const aborted = decideAccel({ ...healthy, qemu: msrAbort }, "auto");
    assert.deepEqual([aborted.kvm, aborted.accel], [false, "tcg"]);
    assert.match(aborted.reason, /exited before the guest ran .*MSR 0x10a/);
    const silent = decideAccel({ ...healthy, qemu: { outcome: "timeout", ms: 10_000, detail: "no QMP answer within 10000 ms" } }, "auto");
    assert.deepEqual([silent.kvm, silent.accel], [false, "tcg"]);
    assert.match(silent.reason, /gave no answer/);
  });

  it("honours a forced accelerator but keeps the measurement in kvm and the reason", () => {
    const forcedKvm = decideAccel({ ...healthy, pvm: true, qemu: msrAbort }, "kvm");
    assert.deepEqual([forcedKvm.kvm, forcedKvm.accel], [false, "kvm"]);
    assert.match(forcedKvm.reason, /^KVM forced by node configuration \(measured: .*kvm_pvm/);
    const forcedTcg = decideAccel(healthy, "tcg");
    assert.deepEqual([forcedTcg.kvm, forcedTcg.accel], [true, "tcg"]);
    assert.match(forcedTcg.reason, /^TCG forced by node configuration \(measured: KVM usable/);
  });
});
