/**
 * QemuDriver through the VMM-neutral interface with the direct launcher: a real TCG boot of the boot
 * kit's kernel, initramfs and guest agent, on each guest channel this machine has; the agent says
 * hello, the drives arrive root-first and read-only as specified, and stop() leaves no process and no
 * socket behind. Also the spec checks that need no boot.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QemuDriver, readHostTscKhz } from "../../../src/agent/index.ts";
import { type DriverContext, type VmSpec } from "../../../src/agent/vmm/index.ts";
import { DirectLauncher } from "../../../src/agent/vmm/direct-launcher.ts";
import { ImpError, silentLogger, systemClock, waitFor } from "../../../src/shared/index.ts";
import { helloFrom, loadBootKit, makeScratchDisk, runExec } from "../../harness/vm.ts";

const work = await mkdtemp(join(tmpdir(), "imp-qdrv-"));
after(() => rm(work, { recursive: true, force: true }));
const context: DriverContext = { launcher: new DirectLauncher({ dieWithParent: true }), clock: systemClock, logger: silentLogger };
const PATH = "/usr/sbin:/usr/bin:/sbin:/bin";
const run = promisify(execFile);

/** PIDs of live processes whose command line mentions `needle` (the VM's directory). */
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

async function socketsIn(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const sockets: string[] = [];
  for (const name of names) if ((await stat(join(dir, name))).isSocket()) sockets.push(name);
  return sockets;
}

describe("QemuDriver with the direct launcher", { timeout: 600_000 }, async () => {
  const kit = await loadBootKit();
  const tscKhz = await readHostTscKhz();
  const channels = [
    { channel: "vsock", driver: kit.vhostDeviceVsock === null ? undefined : new QemuDriver({ vhostDeviceVsock: kit.vhostDeviceVsock, ...(tscKhz === undefined ? {} : { tscKhz }) }) },
    { channel: "serial", driver: new QemuDriver(tscKhz === undefined ? {} : { tscKhz }) },
  ] as const;
  let n = 0;

  for (const { channel, driver } of channels) {
    it(`boots to the guest agent's hello over ${channel}, root drive first and read-only, and stop leaves nothing`, async (t) => {
      if (driver === undefined) {
        t.skip(`vhost-device-vsock is not available: ${kit.vhostDeviceVsockError ?? "unknown reason"}`);
        return;
      }
      assert.equal(driver.channel, channel);
      const dir = join(work, `vm${++n}`);
      const scratch = join(work, `scratch${n}.ext4`);
      await makeScratchDisk(scratch, 128);
      const spec: VmSpec = {
        name: `driver-test-${channel}`,
        dir,
        vcpus: 1,
        memoryMiB: 512,
        kernel: kit.kernel,
        initrd: kit.initrd,
        cmdline: `console=ttyS0 quiet panic=-1 ro root=/dev/vda init=${kit.guestInit} imp.scratch=/dev/vdb`,
        // Scratch listed first on purpose: the driver must still make the root drive /dev/vda.
        drives: [
          { id: "scratch", path: scratch, readOnly: false, isRoot: false },
          { id: "root", path: kit.rootfs, readOnly: true, isRoot: true },
        ],
        guestCid: 3,
      };
      const started = performance.now();
      const vm = await driver.start(spec, context);
      try {
        assert.equal(vm.kind, "qemu");
        assert.equal(vm.spec, spec);
        // Right after spawn the child may not have exec'd yet (its cmdline is still node's): wait for it.
        await waitFor("the VMM process to run with the VM's directory on its command line", () => (processesMentioning(dir).includes(vm.pid) ? true : undefined), { timeoutMs: 10_000, intervalMs: 20 });
        const client = await helloFrom(vm, 120_000, "imp-qemu-driver-test");
        t.diagnostic(`${channel}: start() to hello in ${(performance.now() - started).toFixed(0)} ms (TCG)`);
        const ro = await runExec(client, { execId: "ro", argv: ["/bin/sh", "-c", "cat /sys/block/vda/ro /sys/block/vdb/ro"], env: { PATH } });
        assert.equal(ro.exitCode, 0, ro.stderr);
        assert.equal(ro.stdout, "1\n0\n");
        client.close();
        assert.ok((await socketsIn(dir)).length > 0, "the channel's sockets exist while the VM runs");
      } finally {
        const exit = await vm.stop(5_000);
        assert.ok(exit.signal === "SIGTERM" || exit.signal === "SIGKILL" || exit.code === 0, JSON.stringify(exit));
      }
      assert.ok(vm.downSignal.aborted);
      assert.deepEqual(await vm.stop(5_000), await vm.exited());
      assert.deepEqual(processesMentioning(dir), []);
      assert.deepEqual(await socketsIn(dir), []);
    });
  }

  it("attaches the spec's tap device as the guest's virtio-net interface with the spec's MAC, and leaves the tap to its owner", async (t) => {
    if (process.getuid?.() !== 0 || !existsSync("/dev/net/tun")) {
      t.skip("creating a tap device needs root and /dev/net/tun");
      return;
    }
    const tap = `imptap${process.pid % 100_000}`;
    await run("ip", ["tuntap", "add", "dev", tap, "mode", "tap"]);
    try {
      const dir = join(work, "tap");
      const scratch = join(work, "scratch-tap.ext4");
      await makeScratchDisk(scratch, 64);
      const mac = "06:00:ac:10:00:02";
      const vm = await channels[1].driver.start({
        name: "driver-test-tap", dir, vcpus: 1, memoryMiB: 512, kernel: kit.kernel, initrd: kit.initrd, guestCid: 5,
        cmdline: `console=ttyS0 quiet panic=-1 ro root=/dev/vda init=${kit.guestInit} imp.scratch=/dev/vdb`,
        drives: [{ id: "root", path: kit.rootfs, readOnly: true, isRoot: true }, { id: "scratch", path: scratch, readOnly: false, isRoot: false }],
        network: { tap, mac },
      }, context);
      try {
        const client = await helloFrom(vm, 120_000, "imp-qemu-driver-test");
        const macs = await runExec(client, { execId: "macs", argv: ["/bin/sh", "-c", "cat /sys/class/net/*/address"], env: { PATH } });
        client.close();
        assert.equal(macs.exitCode, 0, macs.stderr);
        assert.ok(macs.stdout.split("\n").includes(mac), macs.stdout);
      } finally {
        await vm.stop(5_000);
      }
      assert.deepEqual(processesMentioning(dir), []);
      // script=no/downscript=no: QEMU neither configured nor removed the host's tap.
      await run("ip", ["link", "show", "dev", tap]);
    } finally {
      await run("ip", ["link", "del", "dev", tap]).catch(() => undefined);
    }
  });

  it("rejects a spec without exactly one root drive before starting anything", async () => {
    const dir = join(work, "bad");
    const spec: VmSpec = {
      name: "bad", dir, vcpus: 1, memoryMiB: 128, kernel: kit.kernel, cmdline: "console=ttyS0", guestCid: 3,
      drives: [{ id: "a", path: kit.rootfs, readOnly: true, isRoot: true }, { id: "b", path: kit.rootfs, readOnly: true, isRoot: true }],
    };
    await assert.rejects(new QemuDriver().start(spec, context), (err: unknown) => err instanceof ImpError && err.code === "VmSpecInvalid" && err.errorClass === "terminal");
    assert.deepEqual(processesMentioning(dir), []);
  });

  it("stops everything it started when the boot is aborted midway", async (t) => {
    const dir = join(work, "aborted");
    const spec: VmSpec = {
      name: "aborted", dir, vcpus: 1, memoryMiB: 128, kernel: kit.kernel, cmdline: "console=ttyS0 panic=0", guestCid: 4,
      drives: [{ id: "root", path: kit.rootfs, readOnly: true, isRoot: true }],
    };
    const vsock = kit.vhostDeviceVsock ?? undefined;
    if (vsock === undefined) t.diagnostic("vhost-device-vsock unavailable: aborting a serial boot (QEMU only)");
    // Abort as soon as QEMU is launched (the vsock backend, if any, runs by then): the remaining
    // step is refused and the boot rolls back.
    const controller = new AbortController();
    const launched: { readonly name: string; readonly pid: number; readonly running: boolean }[] = [];
    const aborting: DriverContext = {
      ...context,
      launcher: {
        launch: async (request) => {
          const p = await context.launcher.launch(request);
          launched.push(p);
          if (request.name === "qemu") controller.abort(new Error("test aborts the boot"));
          return p;
        },
      },
    };
    await assert.rejects(new QemuDriver(vsock === undefined ? {} : { vhostDeviceVsock: vsock }).start(spec, aborting, controller.signal), /test aborts the boot/);
    assert.deepEqual(launched.map((p) => p.name), vsock === undefined ? ["qemu"] : ["vhost-device-vsock", "qemu"]);
    assert.deepEqual(launched.filter((p) => p.running).map((p) => p.name), []);
    assert.deepEqual(processesMentioning(dir), []);
    assert.deepEqual(await socketsIn(dir), []);
  });
});
