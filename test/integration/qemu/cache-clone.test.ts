/**
 * Cache volumes in real VMs (QEMU TCG, the boot kit's kernel and the real guest agent): two VMs each
 * get a copy-on-write clone of one generation as /dev/vdc, mount its ext4 and write; neither sees the
 * other's files, one that fills its clone meets ENOSPC while the other writes on, the generation is
 * unchanged, and a VM on the generation promoted from one clone finds that clone's files and only
 * those. What src/agent/cache/ promises, seen from inside guests.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, open, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { promisify } from "node:util";
import { QemuDriver, readHostTscKhz, type GuestClient } from "../../../src/agent/index.ts";
import { cloneGeneration, createEmptyGeneration, promoteClone } from "../../../src/agent/cache/index.ts";
import type { DriverContext, RunningVm } from "../../../src/agent/vmm/index.ts";
import { DirectLauncher } from "../../../src/agent/vmm/direct-launcher.ts";
import { silentLogger, systemClock } from "../../../src/shared/index.ts";
import { bootKitVmSpec, helloFrom, loadBootKit, makeScratchDisk, runExec } from "../../harness/vm.ts";

const run = promisify(execFile);
const missing = await run("qemu-img", ["--version"]).then(() => undefined, () => "qemu-img is not installed (Debian's qemu-utils; scripts/setup.sh installs it)");
if (missing !== undefined) process.stdout.write(`# cache volumes in VMs: cannot run here: ${missing}\n`);
const work = await mkdtemp(join(tmpdir(), "imp-cache-vm-"));
after(() => rm(work, { recursive: true, force: true }));
const context: DriverContext = { launcher: new DirectLauncher({ dieWithParent: true }), clock: systemClock, logger: silentLogger };
const PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

describe("cache volume clones in real VMs", { timeout: 600_000, skip: missing }, async () => {
  const kit = await loadBootKit();
  const tscKhz = await readHostTscKhz();
  const driver = new QemuDriver(tscKhz === undefined ? {} : { tscKhz });
  let n = 0;

  /** Boots a VM with `clone` as /dev/vdc; returns it with a guest client that said hello. */
  async function boot(clone: string, generation: string): Promise<{ vm: RunningVm; client: GuestClient }> {
    const i = ++n;
    const scratch = join(work, `scratch${i}.ext4`);
    await makeScratchDisk(scratch, 64);
    const vm = await driver.start(bootKitVmSpec(kit, {
      name: `cache-${i}`,
      dir: join(work, `vm${i}`),
      memoryMiB: 256,
      scratch,
      guestCid: 2 + i,
      extraDrives: [{ id: "cache", path: clone, readOnly: false, isRoot: false, format: "qcow2", backing: generation }],
    }), context);
    try {
      return { vm, client: await helloFrom(vm, 180_000, "imp-cache-test") };
    } catch (err) {
      await vm.stop(5_000);
      throw err;
    }
  }

  /** Boots one VM per clone; if any boot fails, stops those that came up before failing. */
  async function bootAll(pairs: ReadonlyArray<readonly [string, string]>): Promise<Array<{ vm: RunningVm; client: GuestClient }>> {
    const booted = await Promise.allSettled(pairs.map(([clone, gen]) => boot(clone, gen)));
    const up = booted.flatMap((b) => (b.status === "fulfilled" ? [b.value] : []));
    const failure = booted.find((b) => b.status === "rejected");
    if (failure !== undefined) {
      await stopAll(up);
      throw failure.reason;
    }
    return up;
  }

  async function stopAll(vms: ReadonlyArray<{ vm: RunningVm; client: GuestClient }>): Promise<void> {
    for (const v of vms) v.client.close();
    await Promise.all(vms.map((v) => v.vm.stop(5_000)));
  }

  async function sh(client: GuestClient, id: string, script: string): Promise<string> {
    const r = await runExec(client, { execId: id, argv: ["/bin/sh", "-c", script], env: { PATH } }, 60_000);
    assert.equal(r.exitCode, 0, `${id}: ${r.stderr}`);
    return r.stdout;
  }
  const mount = "mkdir -p /tmp/cache && mount -t ext4 /dev/vdc /tmp/cache";

  it("two VMs on clones of one generation never see each other's writes; a VM on the promoted clone sees that clone's only", async () => {
    const gen = await createEmptyGeneration(work, "g1", 128 * 1024 ** 2);
    const [a, b] = [join(work, "a.qcow2"), join(work, "b.qcow2")];
    await cloneGeneration(gen, a);
    await cloneGeneration(gen, b);
    const [va, vb] = await bootAll([[a, gen], [b, gen]]) as [{ vm: RunningVm; client: GuestClient }, { vm: RunningVm; client: GuestClient }];
    try {
      await sh(va.client, "a-write", `${mount} && echo from-a > /tmp/cache/a && sync`);
      await sh(vb.client, "b-write", `${mount} && echo poisoned > /tmp/cache/b && sync`);
      assert.equal(await sh(va.client, "a-look", "ls /tmp/cache | grep -v lost+found | tr '\\n' ' '"), "a ");
      assert.equal(await sh(vb.client, "b-look", "ls /tmp/cache | grep -v lost+found | tr '\\n' ' '"), "b ");
      // A job that fills its clone meets the generation's size as ENOSPC in its own filesystem.
      const fill = await runExec(vb.client, { execId: "b-fill", argv: ["/bin/sh", "-c", "dd if=/dev/zero of=/tmp/cache/fill bs=1M count=200 2>&1; sync"], env: { PATH } }, 180_000);
      assert.match(fill.stdout, /No space left on device/, fill.stdout);
      assert.equal((await sh(va.client, "a-after-fill", "echo still > /tmp/cache/a2 && cat /tmp/cache/a2")), "still\n", "the other VM writes on");
      await sh(va.client, "a-umount", "rm /tmp/cache/a2 && umount /tmp/cache");
    } finally {
      await stopAll([va, vb]);
    }
    const filled = (await stat(b)).size;
    assert.ok(filled <= 128 * 1024 ** 2 + 8 * 1024 ** 2, `a filled clone stays within its generation's size plus qcow2 metadata: ${filled} bytes`);
    const next = await promoteClone(a, gen, work, "g2");
    const c = join(work, "c.qcow2");
    await cloneGeneration(next, c);
    const d = join(work, "d.qcow2");
    await cloneGeneration(gen, d);
    const [vc, vd] = await bootAll([[c, next], [d, gen]]) as [{ vm: RunningVm; client: GuestClient }, { vm: RunningVm; client: GuestClient }];
    try {
      assert.equal(await sh(vc.client, "c-look", `${mount} && ls /tmp/cache | grep -v lost+found | tr '\\n' ' ' && cat /tmp/cache/a`), "a from-a\n");
      assert.equal(await sh(vd.client, "d-look", `${mount} && ls /tmp/cache | grep -v lost+found | wc -l`).then((s) => s.trim()), "0", "the old generation is as it was made");
    } finally {
      await stopAll([vc, vd]);
    }
  });

  it("a generation whose bytes are a qcow2 header naming a host file is read as the bytes it holds, never as that file", async () => {
    // What a job can leave in its clone: the first bytes of its disk made a qcow2 header whose
    // backing file is a host file. Promoted, that is a generation; the next VM must see those bytes.
    const secret = join(work, "host-secret");
    await writeFile(secret, "host secret: no guest reads this\n");
    const hostile = join(work, "hostile.qcow2");
    await run("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "raw", "-b", secret, hostile, "64M"]);
    const next = await createEmptyGeneration(work, "h1", 64 * 1024 ** 2);
    await chmod(next, 0o600);
    const handle = await open(next, "r+");
    try {
      await handle.write(await readFile(hostile), 0, undefined, 0);
    } finally {
      await handle.close();
    }
    await chmod(next, 0o400);
    const f = join(work, "f.qcow2");
    await cloneGeneration(next, f);
    const [vf] = await bootAll([[f, next]]) as [{ vm: RunningVm; client: GuestClient }];
    try {
      const seen = await sh(vf.client, "f-read", "head -c 4 /dev/vdc | od -An -c | tr -d ' '; cat /dev/vdc | grep -c 'host secret' || true");
      assert.equal(seen, "QFI373\n0\n", "the guest sees the header's bytes (QFI\\xfb), and nothing of the host file");
    } finally {
      await stopAll([vf]);
    }
  });
});
