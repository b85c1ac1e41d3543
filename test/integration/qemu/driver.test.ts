/**
 * QemuVm failure paths that need no guest: every one must end with a classified error and no process
 * left behind. (Booting paths are covered by test/e2e.)
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QemuVm, type QemuVmOptions } from "../../../src/agent/vmm/index.ts";
import { ImpError, waitFor } from "../../../src/shared/index.ts";
import { loadBootKit } from "../../harness/vm.ts";

const dir = mkdtempSync(join(tmpdir(), "imp-qd-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** PIDs of live processes whose command line mentions `needle` (our per-test directory). */
function processesMentioning(needle: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      if (/\) Z /.test(stat)) continue; // a zombie is already dead, only not yet reaped
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(needle)) pids.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return pids;
}

function options(overrides: Partial<QemuVmOptions>): QemuVmOptions {
  return {
    dir: join(dir, `vm${++n}`),
    channel: "none",
    dieWithParent: true,
    machine: { kernel: "/nonexistent/vmlinuz", cmdline: ["console=ttyS0"], memoryMiB: 128, vcpus: 1, accel: "tcg", drives: [] },
    ...overrides,
  };
}

describe("QemuVm.start()", () => {
  it("rejects with VmmSpawnFailed when the QEMU binary does not exist", async () => {
    await assert.rejects(QemuVm.start(options({ qemuBinary: "/nonexistent/qemu" })), (err: unknown) => {
      assert.ok(err instanceof ImpError);
      assert.equal(err.code, "VmmSpawnFailed");
      return true;
    });
  });

  it("rejects with VsockBackendExited when vhost-device-vsock dies at start, leaving nothing running", async () => {
    const o = options({ channel: "vsock", vhostDeviceVsock: "/bin/false" });
    await assert.rejects(QemuVm.start(o), (err: unknown) => err instanceof ImpError && err.code === "VsockBackendExited");
    assert.deepEqual(processesMentioning(o.dir), []);
  });

  it("fails connectGuest with QemuExited and QEMU's own words once QEMU could not load the kernel", async () => {
    const kernel = join(dir, "not-a-kernel");
    writeFileSync(kernel, "garbage");
    const o = options({ channel: "serial", machine: { ...options({}).machine, kernel } });
    const vm = await QemuVm.start(o);
    try {
      const exit = await vm.exited();
      assert.notEqual(exit.code, 0);
      assert.ok(vm.downSignal.aborted);
      await assert.rejects(vm.connectGuest({ timeoutMs: 60_000 }), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "QemuExited");
        assert.match(err.message, /qemu: .*kernel/i);
        return true;
      });
    } finally {
      await vm.stop();
    }
    assert.deepEqual(processesMentioning(o.dir), []);
  });
});

describe("QemuVm.stop()", () => {
  it("kills a running VM and its vsock backend, and is idempotent", async () => {
    const kit = await loadBootKit();
    if (kit.vhostDeviceVsock === null) assert.fail(`vhost-device-vsock unavailable: ${kit.vhostDeviceVsockError ?? "?"}`);
    const o = options({
      channel: "vsock",
      vhostDeviceVsock: kit.vhostDeviceVsock,
      // A kernel that never finds an init: QEMU keeps running until stopped.
      machine: { kernel: kit.kernel, cmdline: ["console=ttyS0", "panic=0"], memoryMiB: 128, vcpus: 1, accel: "tcg", drives: [] },
    });
    const vm = await QemuVm.start(o);
    assert.ok(vm.running);
    // Right after spawn a child may still be the forked Node.js, not yet exec'd into its program.
    await waitFor("qemu and vhost-device-vsock to run", () => (processesMentioning(o.dir).length === 2 ? true : undefined), { timeoutMs: 10_000, intervalMs: 20 });
    const exit = await vm.stop(2_000);
    assert.equal(vm.running, false);
    assert.ok(exit.signal === "SIGTERM" || exit.code === 0, JSON.stringify(exit));
    assert.deepEqual(await vm.stop(), exit);
    assert.deepEqual(processesMentioning(o.dir), []);
  });
});
