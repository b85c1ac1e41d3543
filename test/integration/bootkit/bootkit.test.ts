/**
 * The boot kit built by scripts/setup.d/40-bootkit.sh, checked without booting: the initramfs loads
 * every module after its dependencies, the rootfs carries the current guest agent, and the kernel
 * checker names exactly what Debian's cloud kernel lacks for Firecracker and Docker.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { debugfs, loadBootKit } from "../../harness/vm.ts";

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../../..");

async function initramfsFile(initrd: string, member: string): Promise<string> {
  const { stdout } = await run("sh", ["-c", `zcat "$1" | cpio -i --quiet --to-stdout "$2"`, "sh", initrd, member]);
  return stdout;
}

describe("the boot kit", () => {
  it("loads each initramfs module after every module it depends on (modules.dep)", async () => {
    const kit = await loadBootKit();
    const order = (await initramfsFile(kit.initrd, "etc/imp-modules")).trim().split("\n");
    const depFile = await readFile(join(kit.kernelDir, "lib/modules", kit.kernelRelease, "modules.dep"), "utf8");
    const deps = new Map(
      depFile.trim().split("\n").map((line) => {
        const [mod = "", rest = ""] = line.split(":");
        return [mod.replace(/\.(xz|zst|gz)$/, ""), rest.trim().split(/\s+/).filter(Boolean).map((d) => d.replace(/\.(xz|zst|gz)$/, ""))];
      }),
    );
    for (const wanted of ["virtio_mmio.ko", "virtio_blk.ko", "virtio_console.ko", "vmw_vsock_virtio_transport.ko", "overlay.ko"]) {
      assert.ok(order.some((m) => m.endsWith(`/${wanted}`)), `${wanted} missing from ${order.join(", ")}`);
    }
    order.forEach((mod, index) => {
      for (const dep of deps.get(mod) ?? assert.fail(`${mod} is not in modules.dep`)) {
        const at = order.indexOf(dep);
        assert.ok(at >= 0 && at < index, `${mod} is loaded before its dependency ${dep}`);
      }
    });
  });

  it("puts the current guest agent at /.imp/imp-guest on an ext4 rootfs labelled imp-root", async () => {
    const kit = await loadBootKit();
    const inImage = await debugfs(kit.rootfs, "stat /.imp/imp-guest");
    const guest = process.env.IMP_GUEST_BIN ?? join(process.env.IMP_CACHE ?? join(repoRoot, ".cache"), "guest/imp-guest");
    const { size } = await stat(guest);
    assert.match(inImage, new RegExp(`Size: ${size}\\b`));
    assert.match(inImage, /Mode: +0755/);
    assert.match(await debugfs(kit.rootfs, "stats"), /Filesystem volume name: +imp-root/);
  });

  it("check-kernel-config.sh names exactly what Debian's cloud kernel lacks for Firecracker and for Docker in the job", async () => {
    const kit = await loadBootKit();
    const config = join(kit.kernelDir, "boot", `config-${kit.kernelRelease}`);
    const result = await run("bash", [join(repoRoot, "scripts/bootkit/check-kernel-config.sh"), config]).then(
      () => assert.fail("the Debian cloud kernel passed the Firecracker check"),
      (err: { code: number; stdout: string }) => err,
    );
    assert.equal(result.code, 1);
    const missing = result.stdout.trim().split("\n").map((l) => l.split(/\s+/)[0]);
    assert.deepEqual(missing, [
      "CONFIG_VIRTIO_MMIO", "CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES", "CONFIG_VIRTIO_BLK", "CONFIG_OVERLAY_FS",
      "CONFIG_VSOCKETS", "CONFIG_VIRTIO_VSOCKETS", "CONFIG_VIRTIO_NET",
      // Debian builds what Docker needs as modules; a Firecracker guest has no initramfs to load them from.
      "CONFIG_VETH", "CONFIG_BRIDGE", "CONFIG_BRIDGE_NETFILTER", "CONFIG_NF_CONNTRACK", "CONFIG_NF_NAT",
      "CONFIG_NF_TABLES", "CONFIG_NFT_NAT", "CONFIG_NFT_COMPAT", "CONFIG_NETFILTER_XTABLES",
      "CONFIG_NETFILTER_XT_MATCH_ADDRTYPE", "CONFIG_NETFILTER_XT_MATCH_CONNTRACK",
      "CONFIG_NETFILTER_XT_TARGET_MASQUERADE", "CONFIG_NETFILTER_XT_NAT", "CONFIG_NF_CT_NETLINK",
      "CONFIG_VSOCKETS_LOOPBACK",
    ]);
  });
});
