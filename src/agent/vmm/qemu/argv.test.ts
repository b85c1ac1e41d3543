import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../../../shared/index.ts";
import { buildQemuArgv, kernelCmdline, qemuEscape, TCG_TB_SIZE_MIB, type QemuMachineSpec } from "./argv.ts";

const base: QemuMachineSpec = {
  kernel: "/k/vmlinuz",
  initrd: "/k/initrd.cpio.gz",
  cmdline: ["console=ttyS0", "panic=-1"],
  memoryMiB: 512,
  vcpus: 1,
  accel: "tcg",
  consoleLog: "/vm/serial,1.log",
  drives: [
    { id: "root", path: "/vm/root.ext4", readOnly: true },
    { id: "scratch", path: "/vm/scratch,1.ext4" },
  ],
};

const invalidSpec = (err: unknown): boolean => err instanceof ImpError && err.code === "VmSpecInvalid" && err.errorClass === "terminal";

/** The value following `flag` at each of its occurrences. */
const values = (argv: string[], flag: string): string[] => argv.flatMap((a, i) => (a === flag ? [argv[i + 1] ?? ""] : []));

describe("buildQemuArgv()", () => {
  it("attaches drives in order as virtio-blk-device, escaping commas and honouring readOnly", () => {
    const argv = buildQemuArgv(base);
    assert.deepEqual(values(argv, "-drive"), [
      "file=/vm/root.ext4,if=none,id=root,format=raw,readonly=on",
      "file=/vm/scratch,,1.ext4,if=none,id=scratch,format=raw",
    ]);
    assert.deepEqual(values(argv, "-device"), ["virtio-blk-device,drive=root", "virtio-blk-device,drive=scratch"]);
  });

  it("attaches a qcow2 copy-on-write clone as qcow2 and refuses any other format", () => {
    const argv = buildQemuArgv({ ...base, drives: [...base.drives, { id: "cache", path: "/vm/cache.qcow2", format: "qcow2", backing: "/c/gen,1.raw" }] });
    assert.equal(values(argv, "-drive")[2], "file=/vm/cache.qcow2,if=none,id=cache,format=qcow2,backing.driver=raw,backing.file.filename=/c/gen,,1.raw", "the backing file and its format from the command line, not the header");
    assert.throws(() => buildQemuArgv({ ...base, drives: [{ id: "x", path: "/x", format: "vmdk" as "raw" }] }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, drives: [{ id: "x", path: "/x", format: "qcow2" }] }), invalidSpec, "a qcow2 drive without its backing");
    assert.throws(() => buildQemuArgv({ ...base, drives: [{ id: "x", path: "/x", backing: "/y" }] }), invalidSpec, "a raw drive with a backing");
  });

  it("puts RAM in a file for memory snapshots: shared for a template, private (copy-on-write) for a restore, with a monitor and -incoming defer", () => {
    const template = buildQemuArgv({ ...base, memoryFile: { path: "/s/mem,1", share: true }, qmpSocket: "/vm/qmp.sock" });
    assert.deepEqual(values(template, "-M"), ["microvm,memory-backend=mem"]);
    assert.deepEqual(values(template, "-object"), ["memory-backend-file,id=mem,size=512M,mem-path=/s/mem,,1,share=on"]);
    assert.deepEqual(values(template, "-qmp"), ["unix:/vm/qmp.sock,server=on,wait=off"]);
    assert.deepEqual(values(template, "-incoming"), []);
    const restored = buildQemuArgv({ ...base, memoryFile: { path: "/s/mem,1", share: false }, qmpSocket: "/vm/qmp.sock", incoming: true });
    assert.deepEqual(values(restored, "-object"), ["memory-backend-file,id=mem,size=512M,mem-path=/s/mem,,1,share=off"]);
    assert.deepEqual(values(restored, "-incoming"), ["defer"]);
    assert.deepEqual(values(buildQemuArgv(base), "-qmp"), []);
  });

  it("refuses RAM in a file with the vsock channel (vhost-user needs shared RAM and cannot migrate)", () => {
    assert.throws(() => buildQemuArgv({ ...base, memoryFile: { path: "/s/mem", share: false }, channel: { kind: "vsock", vhostUserSocket: "/vm/vu.sock" } }), invalidSpec);
  });

  it("bounds TCG's translated-code buffer (QEMU's 1 GiB default outgrew the VM's memory limit); KVM has none", () => {
    assert.deepEqual(values(buildQemuArgv(base), "-accel"), [`tcg,tb-size=${TCG_TB_SIZE_MIB}`]);
    assert.ok(TCG_TB_SIZE_MIB <= 128);
    assert.deepEqual(values(buildQemuArgv({ ...base, accel: "kvm" }), "-accel"), ["kvm"]);
  });

  it("never reboots and appends the console to its file, without a monitor", () => {
    const argv = buildQemuArgv(base);
    for (const flag of ["-no-reboot", "-nodefaults", "-no-user-config"]) assert.ok(argv.includes(flag), flag);
    assert.deepEqual(values(argv, "-serial"), ["chardev:con0"]);
    assert.deepEqual(values(argv, "-chardev"), ["file,id=con0,path=/vm/serial,,1.log,append=on"]);
    assert.ok(!argv.some((a) => a.includes("stdio")));
    assert.deepEqual(values(argv, "-M"), ["microvm"]);
  });

  it("puts guest memory in a shared memfd and adds vhost-user-vsock-device for the vsock channel", () => {
    const argv = buildQemuArgv({ ...base, channel: { kind: "vsock", vhostUserSocket: "/vm/vhost.sock" } });
    assert.deepEqual(values(argv, "-M"), ["microvm,memory-backend=mem"]);
    assert.deepEqual(values(argv, "-object"), ["memory-backend-memfd,id=mem,size=512M,share=on"]);
    assert.ok(values(argv, "-chardev").includes("socket,id=vsock0,path=/vm/vhost.sock"));
    assert.ok(values(argv, "-device").includes("vhost-user-vsock-device,chardev=vsock0"));
  });

  it("exposes a named virtio-serial port on a listening Unix socket for the serial channel", () => {
    const argv = buildQemuArgv({ ...base, channel: { kind: "serial", socketPath: "/vm/agent.sock", portName: "imp.agent" } });
    assert.ok(values(argv, "-chardev").includes("socket,id=agent0,path=/vm/agent.sock,server=on,wait=off"));
    assert.ok(values(argv, "-device").includes("virtserialport,name=imp.agent,chardev=agent0"));
    assert.equal(values(argv, "-object").length, 0);
  });

  it("attaches a host tap device on virtio-net with the guest's MAC, leaving its setup to the agent", () => {
    const argv = buildQemuArgv({ ...base, tap: { tap: "imp-tap0", mac: "06:00:AC:10:00:02" } });
    assert.deepEqual(values(argv, "-netdev"), ["tap,id=n0,ifname=imp-tap0,script=no,downscript=no"]);
    assert.ok(values(argv, "-device").includes("virtio-net-device,netdev=n0,mac=06:00:ac:10:00:02"));
    assert.deepEqual(values(buildQemuArgv(base), "-netdev"), []);
  });

  it("rejects duplicate drive ids, tiny memory, bad port names, tap names and MACs as VmSpecInvalid", () => {
    assert.throws(() => buildQemuArgv({ ...base, drives: [{ id: "a", path: "/x" }, { id: "a", path: "/y" }] }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, memoryMiB: 16 }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, vcpus: 0 }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, channel: { kind: "serial", socketPath: "/s", portName: "a,b" } }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, tap: { tap: "tap0,script=/evil", mac: "06:00:00:00:00:01" } }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, tap: { tap: "a-very-long-tap-name", mac: "06:00:00:00:00:01" } }), invalidSpec);
    assert.throws(() => buildQemuArgv({ ...base, tap: { tap: "tap0", mac: "06:00:00:00:00:01,x" } }), invalidSpec);
  });
});

describe("kernelCmdline()", () => {
  it("adds tsc_early_khz when the host TSC rate is known and not already given", () => {
    assert.equal(kernelCmdline({ cmdline: ["quiet"], tscKhz: 2596122 }), "quiet tsc_early_khz=2596122");
    assert.equal(kernelCmdline({ cmdline: ["tsc_early_khz=1"], tscKhz: 2 }), "tsc_early_khz=1");
  });
  it("rejects arguments with whitespace or control characters", () => {
    assert.throws(() => kernelCmdline({ cmdline: ["a b"] }), invalidSpec);
    assert.throws(() => kernelCmdline({ cmdline: ["a\nb"] }), invalidSpec);
    assert.throws(() => kernelCmdline({ cmdline: ["x".repeat(2048)] }), invalidSpec);
  });
});

describe("qemuEscape()", () => {
  it("doubles commas", () => assert.equal(qemuEscape("a,b,,c"), "a,,b,,,,c"));
});
