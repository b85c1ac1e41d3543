/**
 * Re-adoption of running VMs after an agent restart, with the real supervisor, real QEMU (TCG) and
 * the real Firecracker. An "agent run" starts a VM under SupervisorLauncher; the restart is simulated
 * by dropping every JS object of that run (guest client closed, supervisor connections detached,
 * console follower closed) while the VM keeps running. A fresh run adopts the processes
 * (adoptAllSupervised) and the driver rebuilds the VM from its record (readVmRecord + adopt): the same
 * guest answers again, exec works, stop works, and nothing is left (no process by pid and start
 * time, no socket, no record).
 */
import { after, describe, it, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, rmdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { connectGuest } from "../../../src/agent/vm/index.ts";
import { adoptAllSupervised, SupervisorLauncher, vmMemoryLimitBytes, type SupervisedProcess, type ProcessRef } from "../../../src/agent/supervisor/index.ts";
import { memoryMount } from "../../../src/agent/supervisor/cgroups.ts";
import { liveness } from "../../../src/agent/supervisor/proc.ts";
import { QEMU_TCG_MEMORY_OVERHEAD_MIB, QemuDriver, readHostTscKhz, readVmRecord, vmRecordPath } from "../../../src/agent/vmm/index.ts";
import { FirecrackerDriver } from "../../../src/agent/vmm/firecracker/index.ts";
import type { LaunchRequest, ProcessLauncher, VmSpec } from "../../../src/agent/vmm/types.ts";
import { ImpError, silentLogger, systemClock, waitFor } from "../../../src/shared/index.ts";
import { bootKitVmSpec, loadBootKit, makeScratchDisk, runExec } from "../../harness/vm.ts";
import { binariesOrSkip, describeKvm, isSocket, kvmSituation, vmFiles } from "../firecracker/fixtures.ts";

const repoRoot = join(import.meta.dirname, "..", "..", "..");
const supervisorBinary = process.env.IMP_SUPERVISOR_BIN ?? join(process.env.IMP_CACHE ?? join(repoRoot, ".cache"), "supervisor", "imp-supervisor");
const noSupervisor = existsSync(supervisorBinary) ? undefined : `no supervisor binary at ${supervisorBinary} (run scripts/setup.d/35-supervisor.sh)`;
const cgroupParent = `imp-adopt-test-${process.pid}`;
const mount = await memoryMount("/sys/fs/cgroup");
const withCgroup = process.getuid?.() === 0 && mount !== undefined;
const PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

// Short: Unix socket paths inside must stay under 108 bytes.
const base = await mkdtemp("/tmp/imp-adopt-");
after(async () => {
  await rm(base, { recursive: true, force: true });
  if (mount !== undefined && existsSync(join(mount, cgroupParent))) rmdirSync(join(mount, cgroupParent));
});

/** A supervising launcher that remembers what it launched, so the test can drop (detach) it like a dying agent. */
function recordingLauncher(vmId: string, vmDir: string, memoryMiB: number): { launcher: ProcessLauncher; launched: SupervisedProcess[] } {
  const inner = new SupervisorLauncher({
    supervisorBinary, vmId, vmDir,
    ...(withCgroup ? { cgroup: { parent: cgroupParent } } : {}),
    memoryLimitBytes: () => vmMemoryLimitBytes(memoryMiB, QEMU_TCG_MEMORY_OVERHEAD_MIB),
  });
  const launched: SupervisedProcess[] = [];
  return {
    launched,
    launcher: {
      launch: async (request: LaunchRequest) => {
        const p = await inner.launch(request);
        launched.push(p);
        return p;
      },
    },
  };
}

const refusingLauncher: ProcessLauncher = { launch: () => Promise.reject(new Error("an adopting agent run launches nothing")) };

/** Live processes whose command line mentions `needle`. */
function processesMentioning(needle: string): number[] {
  return readdirSync("/proc").filter((e) => /^[0-9]+$/.test(e)).flatMap((pid) => {
    try {
      if (/\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"))) return [];
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(needle) ? [Number(pid)] : [];
    } catch {
      return [];
    }
  });
}

function socketsUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isSocket()).map((e) => join(e.parentPath, e.name));
}

async function assertGone(refs: readonly ProcessRef[]): Promise<void> {
  for (const ref of refs) {
    await waitFor(`pid ${ref.pid} gone`, async () => ((await liveness(ref)) === "alive" ? undefined : true), { timeoutMs: 15_000, intervalMs: 25 });
  }
}

function refsOf(processes: readonly SupervisedProcess[]): ProcessRef[] {
  return processes.flatMap((p) => [p.identity.supervisor, p.identity.process]);
}

function skipWithoutSupervisor(t: TestContext): boolean {
  if (noSupervisor === undefined) return false;
  t.skip(noSupervisor);
  return true;
}

describe("adopting a running VM after an agent restart", { timeout: 600_000 }, async () => {
  const kit = await loadBootKit();
  const tscKhz = await readHostTscKhz();
  const qemuDriver = (): QemuDriver => new QemuDriver({
    ...(kit.vhostDeviceVsock === null ? {} : { vhostDeviceVsock: kit.vhostDeviceVsock }),
    ...(tscKhz === undefined ? {} : { tscKhz }),
  });
  let n = 0;

  async function qemuSpec(): Promise<{ vmDir: string; vmId: string; spec: VmSpec }> {
    const vmId = `qa${++n}`;
    const vmDir = join(base, vmId);
    const scratch = join(base, `${vmId}-scratch.ext4`);
    await makeScratchDisk(scratch, 64);
    const spec = bootKitVmSpec(kit, { name: `adopt-${vmId}`, dir: join(vmDir, "vmm"), memoryMiB: 384, scratch, guestCid: 40 + n });
    return { vmDir, vmId, spec };
  }

  it("QEMU: the same guest answers hello and exec over a new connection, and stop leaves nothing", async (t) => {
    if (skipWithoutSupervisor(t)) return;
    const driver = qemuDriver();
    t.diagnostic(`guest channel: ${driver.channel}${driver.channel === "serial" ? ` (vhost-device-vsock unavailable: ${kit.vhostDeviceVsockError ?? "?"})` : ""}; cgroups: ${withCgroup ? "on" : "off"}`);
    const { vmDir, vmId, spec } = await qemuSpec();
    const first = recordingLauncher(vmId, vmDir, spec.memoryMiB);
    const vm = await driver.start(spec, { launcher: first.launcher, clock: systemClock, logger: silentLogger });
    const refs = refsOf(first.launched);
    try {
      const serial = driver.channel === "serial";
      const client = await connectGuest(vm, { timeoutMs: 180_000, serial, clientName: "imp-adopt-test" });
      const before = await runExec(client, { execId: "before", argv: ["/bin/cat", "/proc/sys/kernel/random/boot_id"], env: { PATH } });
      assert.equal(before.exitCode, 0, before.stderr);
      const record = await readVmRecord(spec.dir);
      assert.deepEqual(record, { version: 1, driver: "qemu", channel: driver.channel, spec });

      // The agent "restarts": every object of this run is dropped; the VM keeps running.
      client.close();
      await vm.serial.close();
      for (const p of first.launched) p.detach();
      const pidBefore = vm.pid;

      const restarted = await adoptAllSupervised(vmDir);
      assert.deepEqual(restarted.refused, []);
      assert.deepEqual(restarted.adopted.map((p) => p.name), driver.channel === "vsock" ? ["qemu", "vhost-device-vsock"] : ["qemu"]);
      assert.ok(restarted.adopted.every((p) => p.running));
      const recordAgain = await readVmRecord(spec.dir);
      assert.ok(recordAgain !== undefined);
      const adoptedVm = await qemuDriver().adopt(recordAgain.spec, restarted.adopted, { launcher: refusingLauncher, clock: systemClock, logger: silentLogger });
      try {
        assert.equal(adoptedVm.pid, pidBefore);
        assert.equal(adoptedVm.kind, "qemu");
        assert.equal(adoptedVm.downSignal.aborted, false);
        const again = await connectGuest(adoptedVm, { timeoutMs: 60_000, serial, clientName: "imp-adopt-test-2" });
        const after = await runExec(again, { execId: "after", argv: ["/bin/sh", "-c", "cat /proc/sys/kernel/random/boot_id; echo adopted >&2"], env: { PATH } });
        again.close();
        assert.equal(after.exitCode, 0, after.stderr);
        assert.equal(after.stdout, before.stdout, "the same guest boot answers (no reboot)");
        assert.equal(after.stderr, "adopted\n");
        // The console follower resumed on the existing log: it holds this boot's console from its start.
        await adoptedVm.serial.poll();
        assert.ok(adoptedVm.serial.tail().length > 0, "console tail read from the existing log");
      } finally {
        const exit = await adoptedVm.stop(5_000);
        t.diagnostic(`adopted VM stopped: ${JSON.stringify(exit)}`);
        assert.ok(exit.signal === "SIGTERM" || exit.signal === "SIGKILL" || exit.code === 0, JSON.stringify(exit));
      }
      assert.ok(adoptedVm.downSignal.aborted);
      assert.equal((adoptedVm.downSignal.reason as ImpError).code, "QemuExited");
      assert.deepEqual(restarted.adopted.filter((p) => p.running).map((p) => p.name), [], "every adopted process ended");
      await assertGone(refs);
      assert.deepEqual(processesMentioning(vmDir), []);
      assert.deepEqual(socketsUnder(vmDir), []);
      assert.equal(existsSync(vmRecordPath(spec.dir)), false, "the record is gone with the VM");
    } finally {
      for (const p of first.launched) p.signal("SIGKILL");
      await assertGone(refs);
    }
  });

  it("QEMU: adoption is refused with VmAdoptFailed when the vsock backend is gone, and what was left is stopped", async (t) => {
    if (skipWithoutSupervisor(t)) return;
    const driver = qemuDriver();
    if (driver.channel !== "vsock") {
      t.skip(`needs the vsock channel (vhost-device-vsock unavailable: ${kit.vhostDeviceVsockError ?? "?"})`);
      return;
    }
    const { vmDir, vmId, spec } = await qemuSpec();
    const first = recordingLauncher(vmId, vmDir, spec.memoryMiB);
    const vm = await driver.start(spec, { launcher: first.launcher, clock: systemClock, logger: silentLogger });
    const refs = refsOf(first.launched);
    try {
      await vm.serial.close();
      for (const p of first.launched) p.detach();
      // While no agent runs, the backend dies (QEMU may follow: it loses its vhost-user peer).
      const backend = first.launched.find((p) => p.name === "vhost-device-vsock");
      assert.ok(backend !== undefined);
      process.kill(backend.pid, "SIGKILL");
      await assertGone([backend.identity.process]);

      const restarted = await adoptAllSupervised(vmDir);
      const record = await readVmRecord(spec.dir);
      assert.ok(record !== undefined);
      await assert.rejects(qemuDriver().adopt(record.spec, restarted.adopted, { launcher: refusingLauncher, clock: systemClock, logger: silentLogger }), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "VmAdoptFailed");
        assert.equal(err.errorClass, "terminal");
        assert.match(err.message, /^Cannot adopt VM in .*: its (vhost-device-vsock|qemu) process has exited/);
        return true;
      });
      assert.deepEqual(restarted.adopted.filter((p) => p.running).map((p) => p.name), [], "what was left of the VM is stopped");
      await assertGone(refs);
      assert.deepEqual(processesMentioning(vmDir), []);
      assert.deepEqual(socketsUnder(vmDir), []);
      assert.equal(existsSync(vmRecordPath(spec.dir)), false);
    } finally {
      for (const p of first.launched) p.signal("SIGKILL");
      await assertGone(refs);
    }
  });

  it("Firecracker: the adopted VM's API answers Running, and stop sends Ctrl+Alt+Del, then kills, and leaves nothing", async (t) => {
    if (skipWithoutSupervisor(t)) return;
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    if (kvmSituation() === "no-kvm") {
      t.skip("no /dev/kvm: no Firecracker VM can be running to adopt");
      return;
    }
    // The guest kernel only halts (docs/firecracker.md: a Linux guest does not boot here), so the
    // guest channel is not exercised; the VMM, its API and stop are.
    t.diagnostic(`situation: ${describeKvm()}; halting guest kernel`);
    const files = await vmFiles();
    const vmDir = files.dir;
    const driver = new FirecrackerDriver({ firecrackerBinary: bins.firecracker });
    const layout = driver.layoutOf(files.spec);
    const first = recordingLauncher("fa1", vmDir, files.spec.memoryMiB);
    const vm = await driver.start(files.spec, { launcher: first.launcher, clock: systemClock, logger: silentLogger });
    const refs = refsOf(first.launched);
    try {
      assert.equal((await vm.api.describeInstance()).state, "Running");
      assert.deepEqual(await readVmRecord(files.spec.dir), { version: 1, driver: "firecracker", channel: "vsock", spec: files.spec });
      for (const p of first.launched) p.detach();

      const restarted = await adoptAllSupervised(vmDir);
      assert.deepEqual(restarted.refused, []);
      assert.deepEqual(restarted.adopted.map((p) => p.name), ["firecracker"]);
      const record = await readVmRecord(files.spec.dir);
      assert.ok(record !== undefined);
      const adoptedVm = await new FirecrackerDriver({ firecrackerBinary: bins.firecracker }).adopt(record.spec, restarted.adopted, { launcher: refusingLauncher, clock: systemClock, logger: silentLogger });
      assert.equal(adoptedVm.pid, vm.pid);
      const info = await adoptedVm.api.describeInstance();
      assert.equal(info.state, "Running");
      assert.equal(info.id, layout.id);
      assert.ok(isSocket(layout.host.vsockUds));
      const exit = await adoptedVm.stop(1_500);
      t.diagnostic(`adopted Firecracker stopped by ${adoptedVm.stopped?.rung}: ${JSON.stringify(exit)}`);
      assert.equal(adoptedVm.stopped?.rung, "killed", "a halted guest ignores Ctrl+Alt+Del, so the grace period ends in a kill");
      assert.ok(readFileSync(layout.host.logFile, "utf8").includes('with body "{\\"action_type\\":\\"SendCtrlAltDel\\"}"'), "Ctrl+Alt+Del was sent through the API first");
      assert.equal((adoptedVm.downSignal.reason as ImpError).code, "FirecrackerExited");
      await assertGone(refs);
      assert.deepEqual(processesMentioning(vmDir), []);
      assert.deepEqual(socketsUnder(vmDir), []);
      assert.equal(existsSync(vmRecordPath(files.spec.dir)), false);
    } finally {
      for (const p of first.launched) p.signal("SIGKILL");
      await assertGone(refs);
      await files.remove();
    }
  });

  it("Firecracker: adoption without its process is refused with VmAdoptFailed", async (t) => {
    const bins = binariesOrSkip(t);
    if (bins === undefined) return;
    const files = await vmFiles();
    try {
      await assert.rejects(
        new FirecrackerDriver({ firecrackerBinary: bins.firecracker }).adopt(files.spec, [], { launcher: refusingLauncher, clock: systemClock, logger: silentLogger }),
        (err: unknown) => err instanceof ImpError && err.code === "VmAdoptFailed" && err.errorClass === "terminal" && /its firecracker process is not among the adopted ones \(none\)/.test(err.message),
      );
    } finally {
      await files.remove();
    }
  });
});
