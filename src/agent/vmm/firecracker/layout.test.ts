import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { VmSpec } from "../types.ts";
import { firecrackerArgv, jailerArgv } from "./jailer.ts";
import { firecrackerId, jailedLayout, unjailedLayout } from "./layout.ts";

const spec: VmSpec = {
  name: "pool-a/vm_7",
  dir: "/run/imp/vm7",
  vcpus: 1,
  memoryMiB: 128,
  kernel: "/k/vmlinux",
  cmdline: "console=ttyS0 reboot=k panic=1",
  drives: [
    { id: "root", path: "/img/base.ext4", readOnly: true, isRoot: true },
    { id: "scratch", path: "/run/imp/vm7/scratch.ext4", readOnly: false, isRoot: false },
  ],
  guestCid: 7,
};

describe("firecrackerId()", () => {
  it("keeps alphanumerics and hyphens, collapses the rest, caps at 64", () => {
    assert.equal(firecrackerId("pool-a/vm_7"), "pool-a-vm-7");
    assert.equal(firecrackerId("x".repeat(80)).length, 64);
    assert.throws(() => firecrackerId("///"), /Cannot derive/);
  });
});

describe("layouts", () => {
  it("unjailed: sockets and logs in the VM directory, resources at their own paths", () => {
    const layout = unjailedLayout(spec);
    assert.equal(layout.host.apiSocket, "/run/imp/vm7/fc-api.sock");
    assert.equal(layout.vmm.apiSocket, layout.host.apiSocket);
    assert.equal(layout.vmm.drives.get("root"), "/img/base.ext4");
    assert.equal(layout.jail, undefined);
  });

  it("jailed: links for every resource, writable only for what Firecracker writes", () => {
    const layout = jailedLayout(spec, { chrootBaseDir: "/srv/jailer", firecrackerBinary: "/opt/fc/firecracker" });
    assert.equal(layout.jail?.dir, "/srv/jailer/firecracker/pool-a-vm-7");
    assert.equal(layout.jail?.root, "/srv/jailer/firecracker/pool-a-vm-7/root");
    assert.deepEqual(
      layout.jail?.links.map((l) => [l.hostPath, l.inside, l.writable]),
      [
        ["/k/vmlinux", "/kernel", false],
        ["/img/base.ext4", "/drive-root", false],
        ["/run/imp/vm7/scratch.ext4", "/drive-scratch", true],
        ["/run/imp/vm7/firecracker.log", "/firecracker.log", true],
        ["/run/imp/vm7/firecracker.metrics", "/firecracker.metrics", true],
      ],
    );
    assert.equal(layout.host.apiSocket, "/srv/jailer/firecracker/pool-a-vm-7/root/fc-api.sock");
    assert.equal(layout.vmm.apiSocket, "/fc-api.sock");
  });

  it("refuses a layout whose socket paths would not fit sun_path", () => {
    assert.throws(() => unjailedLayout({ ...spec, dir: `/${"d".repeat(100)}` }), /over 107 bytes/);
    assert.throws(() => jailedLayout(spec, { chrootBaseDir: `/${"b".repeat(80)}`, firecrackerBinary: "/fc/firecracker" }), /over 107 bytes/);
  });
});

describe("argv", () => {
  it("Firecracker gets only its API socket and id; the configuration goes over the API", () => {
    assert.deepEqual(firecrackerArgv(unjailedLayout(spec)), ["--api-sock", "/run/imp/vm7/fc-api.sock", "--id", "pool-a-vm-7"]);
  });

  it("the jailer gets id, exec file, uid/gid, base dir, netns, then Firecracker's own argv with in-chroot paths", () => {
    const layout = jailedLayout(spec, { chrootBaseDir: "/srv/jailer", firecrackerBinary: "/opt/fc/firecracker" });
    const options = { binary: "/opt/fc/jailer", chrootBaseDir: "/srv/jailer", uid: 10007, gid: 10007 };
    assert.deepEqual(jailerArgv(options, "/opt/fc/firecracker", layout, "/var/run/netns/vm7"), [
      "--id", "pool-a-vm-7", "--exec-file", "/opt/fc/firecracker", "--uid", "10007", "--gid", "10007",
      "--chroot-base-dir", "/srv/jailer", "--netns", "/var/run/netns/vm7", "--", "--api-sock", "/fc-api.sock",
    ]);
    assert.ok(!jailerArgv(options, "/opt/fc/firecracker", layout, undefined).includes("--netns"));
    assert.throws(() => jailerArgv({ ...options, uid: -1 }, "/opt/fc/firecracker", layout, undefined), /uid -1/);
    assert.throws(() => jailerArgv(options, "/opt/fc/firecracker", unjailedLayout(spec), undefined), /unjailed/);
  });
});
