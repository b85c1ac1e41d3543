/**
 * Imp's own guest kernel (scripts/setup.d/42-guest-kernel.sh, docs/kernel.md): its cached .config
 * passes the Firecracker checker and carries every line of imp.config; then one real QEMU microvm boot
 * under TCG with NO initramfs — the kernel mounts the boot kit's rootfs itself and runs the guest
 * agent as init — reaches the agent's `hello` over the guest channel, runs a command on the overlay
 * root and powers off (QEMU exits 0).
 */
import { after, afterEach, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { defaultChannel, failureTracker, runExec } from "../../harness/vm.ts";
import { bootKernelVm, guestKernelManifestPath, loadGuestKernel, type GuestKernelManifest, type KernelVm } from "./kernel-vm.ts";

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../../..");
const PATH = "/usr/sbin:/usr/bin:/sbin:/bin";
const own: GuestKernelManifest | undefined = await loadGuestKernel();
const skip = own === undefined ? `Imp's guest kernel is not built (${guestKernelManifestPath} missing): run scripts/setup.d/42-guest-kernel.sh` : false;

describe("Imp's guest kernel, as built", { skip }, () => {
  it("passes check-kernel-config.sh (everything Firecracker needs built in, no vsock loopback)", async () => {
    const { stdout } = await run("bash", [join(repoRoot, "scripts/bootkit/check-kernel-config.sh"), own!.config]);
    assert.equal(stdout, "");
  });

  it("has every line of imp.config, no module support and no initramfs support", async () => {
    const config = new Set((await readFile(own!.config, "utf8")).split("\n"));
    const fragment = (await readFile(join(repoRoot, "scripts/bootkit/kernel/imp.config"), "utf8")).split("\n");
    for (const line of fragment.filter((l) => l.startsWith("CONFIG_"))) assert.ok(config.has(line), `${line} missing from ${own!.config}`);
    for (const off of ["CONFIG_MODULES", "CONFIG_BLK_DEV_INITRD", "CONFIG_VSOCKETS_LOOPBACK"]) {
      assert.ok(![...config].some((l) => l.startsWith(`${off}=`)), `${off} is set in ${own!.config}`);
    }
  });
});

describe("Imp's guest kernel, booted under QEMU microvm without an initramfs", { skip, timeout: 300_000 }, (suite) => {
  let t: KernelVm | undefined;
  const failures = failureTracker();

  before(async () => {
    t = await bootKernelVm({ name: "guest-kernel", kernel: "imp", channel: await defaultChannel() });
    suite.diagnostic(`channel ${t.vm.channel}, spawn to hello ${Math.round(t.bootMs)} ms`);
  });
  afterEach(failures.record);
  after(async () => {
    await t?.dispose(!failures.any);
  });

  it("is spawned with no -initrd and the root mounted by the kernel read-only without journal replay", () => {
    assert.ok(!t!.vm.argv.includes("-initrd"), t!.vm.argv.join(" "));
    assert.match(t!.cmdline, /(^| )ro( |$)/);
    assert.match(t!.cmdline, /(^| )rootflags=noload( |$)/);
  });

  it("answers hello over the guest channel", () => {
    assert.deepEqual(t!.hello.versions, [1]);
    assert.match(t!.hello.agent, /^imp-guest\//);
  });

  it("runs Imp's kernel (its release and its own .config in /proc/config.gz)", async () => {
    const uname = await runExec(t!.client, { execId: "uname", argv: ["/bin/uname", "-r"], env: { PATH } });
    assert.equal(uname.exitCode, 0, uname.stderr);
    assert.equal(uname.stdout.trim(), own!.release);
    const config = await runExec(t!.client, { execId: "config", argv: ["/bin/sh", "-c", "zcat /proc/config.gz | grep -E '^# CONFIG_MODULES is not set$|^CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES=y$'"], env: { PATH } });
    assert.equal(config.exitCode, 0, config.stderr);
    assert.deepEqual(config.stdout.trim().split("\n").sort(), ["# CONFIG_MODULES is not set", "CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES=y"]);
  });

  it("gives the agent its overlay root, cgroup2 and hidepid proc", async () => {
    const result = await runExec(t!.client, { execId: "mounts", argv: ["/bin/cat", "/proc/self/mounts"], env: {} });
    const mounts = new Map(result.stdout.trim().split("\n").map((line) => {
      const [, target, fstype, options] = line.split(" ");
      return [target ?? "", `${fstype ?? ""} ${options ?? ""}`] as const;
    }));
    assert.match(mounts.get("/") ?? "", /^overlay /, result.stdout);
    assert.match(mounts.get("/proc") ?? "", /^proc .*hidepid=invisible/, result.stdout);
    assert.match(mounts.get("/sys/fs/cgroup") ?? "", /^cgroup2 /, result.stdout);
    assert.match(mounts.get("/dev") ?? "", /^devtmpfs /, result.stdout);
  });

  it("powers off on shutdown: QEMU exits 0", async () => {
    await t!.client.shutdown("poweroff");
    const exit = await Promise.race([
      t!.vm.exited(),
      new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 60_000).unref()),
    ]);
    assert.notEqual(exit, "timeout", `QEMU still running 60 s after poweroff\n${t!.vm.serial.tail(20)}`);
    assert.deepEqual(exit === "timeout" ? exit : { code: exit.code, signal: exit.signal }, { code: 0, signal: null });
  });
});
