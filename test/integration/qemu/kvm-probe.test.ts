/**
 * The KVM probe against this machine's real /dev/kvm and QEMU, plus the probe's bounds with stand-in
 * QEMU binaries (one that never answers, one that answers like QEMU does on a working KVM host).
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkQemuKvm, probeKvm } from "../../../src/agent/vmm/kvm-probe.ts";

const dir = mkdtempSync(join(tmpdir(), "imp-kvm-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function standIn(name: string, script: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${script}\n`);
  chmodSync(path, 0o755);
  return path;
}

/** Whether the process whose pid a stand-in wrote to `pidFile` still lives (a zombie counts as gone). */
function alive(pidFile: string): boolean {
  const pid = readFileSync(pidFile, "utf8").trim();
  assert.match(pid, /^[0-9]+$/);
  try {
    return !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

describe("probeKvm() on this machine", () => {
  it("reports what the machine is, consistently with the facts it measured", async (t) => {
    const result = await probeKvm();
    t.diagnostic(`probe took ${result.ms.toFixed(0)} ms: kvm=${result.kvm} accel=${result.accel} deviceExists=${result.deviceExists} pvm=${result.pvm}`);
    t.diagnostic(`reason: ${result.reason}`);
    assert.equal(result.deviceExists, existsSync("/dev/kvm"));
    assert.equal(result.pvm, existsSync("/sys/module/kvm_pvm"));
    assert.equal(result.accel, result.kvm ? "kvm" : "tcg");
    assert.equal(result.kvm, result.facts.deviceOpenable && !result.pvm && result.facts.qemu.outcome === "ready");
    if (!result.deviceExists) {
      assert.equal(result.facts.qemu.outcome, "not-run");
      assert.match(result.reason, /\/dev\/kvm does not exist/);
    }
    if (result.pvm) {
      // A nested PVM host: never fast for our unmodified guest kernels, whatever QEMU did.
      assert.equal(result.kvm, false);
      assert.match(result.reason, /kvm_pvm/);
    }
  });

  it("keeps the measurement when node configuration forces an accelerator", async () => {
    const measured = await probeKvm();
    const forced = await probeKvm({ mode: measured.kvm ? "tcg" : "kvm" });
    assert.equal(forced.kvm, measured.kvm);
    assert.equal(forced.accel, measured.kvm ? "tcg" : "kvm");
    assert.match(forced.reason, /forced by node configuration/);
  });

  it("treats a QEMU binary that is not there as not tried, not as KVM", async () => {
    const result = await probeKvm({ qemuBinary: join(dir, "no-such-qemu") });
    assert.equal(result.kvm, false);
    assert.equal(result.accel, "tcg");
    if (result.facts.deviceOpenable) assert.equal(result.facts.qemu.outcome, "not-run");
  });
});

describe("checkQemuKvm()", () => {
  it("gives up within its bound on a QEMU that never answers, and kills it", async () => {
    const pidFile = join(dir, "silent.pid");
    const silent = standIn("silent-qemu", `echo $$ > ${pidFile}; exec sleep 300`);
    const check = await checkQemuKvm({ qemuBinary: silent, timeoutMs: 500 });
    assert.equal(check.outcome, "timeout");
    assert.equal(alive(pidFile), false);
  });

  it("counts QMP's prelaunch answer as a KVM machine created, and stops QEMU", async () => {
    const pidFile = join(dir, "answering.pid");
    const answering = standIn("answering-qemu", `echo $$ > ${pidFile}; echo '{"QMP": {}}'; read a; echo '{"return": {}}'; read b; echo '{"return": {"status": "prelaunch", "running": false}}'; exec sleep 300`);
    const check = await checkQemuKvm({ qemuBinary: answering, timeoutMs: 30_000 });
    assert.equal(check.outcome, "ready");
    assert.equal(alive(pidFile), false);
  });

  it("reports QEMU's own words when it exits before answering", async () => {
    const aborting = standIn("aborting-qemu", `echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69' >&2; exit 134`);
    const check = await checkQemuKvm({ qemuBinary: aborting, timeoutMs: 30_000 });
    assert.equal(check.outcome, "exited");
    assert.match(check.outcome === "exited" ? check.detail : "", /exit status 134: .*failed to set MSR 0x10a/);
  });
});
