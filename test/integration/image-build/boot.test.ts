/**
 * End to end: an image pushed to a real registry is pulled, built into a cached ext4 base
 * with the real guest agent injected, given per-VM disks (base hard-linked and attached read-only,
 * scratch from the template), and booted in QEMU; the guest agent assembles its overlay root, runs a
 * command from the image, and writes land on the scratch disk while the base stays byte-identical.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { readHostTscKhz, type GuestClient } from "../../../src/agent/index.ts";
import { QemuVm } from "../../../src/agent/vmm/index.ts";
import { BaseImages, fileDigestOf, ImageCache } from "../../../src/agent/image/cache/index.ts";
import { prepareVmDisks, ScratchTemplates, type VmDisks } from "../../../src/agent/image/disks/index.ts";
import { GUEST_AGENT_INIT, layerBlobsOf } from "../../../src/agent/image/layers/index.ts";
import { FsContentStore, pullImage } from "../../../src/agent/image/pull/index.ts";
import { buildImage, busyboxLayer } from "../../harness/oci-image.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";
import { helloFrom, loadBootKit, runExec, sha256File } from "../../harness/vm.ts";
import { debugfs } from "./ext4-inspect.ts";

describe("a VM booted from an image built by the image builder", { timeout: 300_000 }, () => {
  let work: string;
  let registry: RunningRegistry;
  let disks: VmDisks;
  let baseSha: string;
  let vm: QemuVm | undefined;
  let client: GuestClient;

  before(async () => {
    const kit = await loadBootKit();
    const guest = process.env.IMP_GUEST_BIN ?? join(import.meta.dirname, "../../../.cache/guest/imp-guest");
    work = await mkdtemp(join(tmpdir(), "imp-boot-"));
    registry = await startRegistry({ rootDir: join(work, "registry") });
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    const store = await FsContentStore.open(join(work, "store"));
    const pulled = await pullImage(`${registry.host}/test/busybox:1`, { store, recordRefs: false });
    const cache = await ImageCache.open({ root: join(work, "cache"), maxBytes: 1024 ** 3 });
    const base = await new BaseImages({ cache }).ensure({ layers: layerBlobsOf(pulled, store), guestAgent: { path: guest, digest: await fileDigestOf(guest) } });
    const vmDir = join(work, "vm1");
    await mkdir(vmDir);
    disks = await prepareVmDisks(vmDir, base, new ScratchTemplates(join(work, "cache", "scratch")), { sizeBytes: 256 * 1024 ** 2 });
    baseSha = await sha256File(disks.base);
    const tscKhz = await readHostTscKhz();
    vm = await QemuVm.start({
      dir: join(vmDir, "qemu"),
      channel: "serial",
      dieWithParent: true,
      machine: {
        kernel: kit.kernel,
        initrd: kit.initrd,
        cmdline: ["console=ttyS0", "quiet", "panic=-1", "ro", "root=/dev/vda", `init=${GUEST_AGENT_INIT}`, "imp.scratch=/dev/vdb"],
        memoryMiB: 512,
        vcpus: 1,
        accel: "tcg",
        ...(tscKhz === undefined ? {} : { tscKhz }),
        drives: [{ id: "root", path: disks.base, readOnly: true }, { id: "scratch", path: disks.scratch }],
      },
    });
    client = await connect(vm, 90_000);
  });

  after(async () => {
    client?.close();
    await vm?.stop();
    await registry?.stop();
    await rm(work, { recursive: true, force: true });
  });

  it("runs a program from the image under the guest agent, on an overlay root", async () => {
    const result = await runExec(client, { execId: "boot-1", argv: ["/bin/sh", "-c", "cat /etc/hostname; grep -c ' / overlay ' /proc/mounts; echo written > /etc/from-vm"], env: { PATH: "/bin" } });
    assert.equal(result.exitCode, 0, result.stderr);
    assert.equal(result.stdout, "imp-test\n1\n");
  });

  it("writes to the scratch disk and never to the shared read-only base", async () => {
    await client.shutdown("poweroff");
    const exit = await vm?.exited();
    assert.equal(exit?.code, 0);
    assert.equal(await sha256File(disks.base), baseSha);
    assert.equal(debugfs(disks.scratch, "cat /upper/etc/from-vm"), "written\n");
  });
});

/** Connects and says hello (helloFrom asks again while the guest has not opened its port); a failure shows the console's tail. */
async function connect(vm: QemuVm, timeoutMs: number): Promise<GuestClient> {
  return helloFrom(vm, timeoutMs, "imp-image-build-test").catch((err: unknown) =>
    Promise.reject(new Error(`Cannot reach the guest agent: ${String(err)}\n--- serial console tail ---\n${vm.serial.tail(40)}`, { cause: err })),
  );
}
