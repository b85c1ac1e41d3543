import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, statfs, truncate, utimes, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execFileSync } from "node:child_process";
import { type ImpError, silentLogger, systemClock } from "../../shared/index.ts";
import { snapshotKey, type SnapshotKeyInput } from "./snapshot-key.ts";
import { snapshotDiskReserveBytes, SnapshotStore, type SnapshotBuilder } from "./snapshot-store.ts";

const run = (cmd: string, args: string[]): void => void execFileSync(cmd, args, { stdio: "pipe" });

const KEY_INPUT: SnapshotKeyInput = { imageKey: "img", kernelDigest: "sha256:k", cmdline: "ro root=/dev/vda", vcpus: 1, memoryMiB: 512, scratchBytes: 1 << 30, network: true, vmm: "qemu" };
const key = (n: number): string => snapshotKey({ ...KEY_INPUT, vcpus: n });

// Every store's directory is removed when the file's tests end: CI machines are shared, and a
// run of this file used to leave a dozen directories in /tmp.
const madeDirs: string[] = [];
after(async () => {
  await Promise.all(madeDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

async function store(maxBytes = 1 << 30): Promise<{ store: SnapshotStore; root: string }> {
  const dir = await mkdtemp(join(tmpdir(), "imp-snapshots-"));
  madeDirs.push(dir);
  const root = join(dir, "snapshots");
  return { store: new SnapshotStore({ root, maxBytes, clock: systemClock, logger: silentLogger }), root };
}

const build = (bytes = 4096): SnapshotBuilder & { calls: number } => {
  const fn = (async (files: Parameters<SnapshotBuilder>[0]) => {
    fn.calls++;
    await writeFile(files.memoryFile, Buffer.alloc(bytes, 7));
    await writeFile(files.statePath, "device state");
    await writeFile(files.scratch, Buffer.alloc(bytes, 1));
    return { bootMs: 3000, saveMs: 15 };
  }) as unknown as SnapshotBuilder & { calls: number };
  fn.calls = 0;
  return fn;
};

describe("snapshotKey()", () => {
  it("differs for every input a restore depends on, and not for equal inputs", () => {
    const base = snapshotKey(KEY_INPUT);
    assert.equal(snapshotKey({ ...KEY_INPUT }), base);
    for (const change of [{ imageKey: "other" }, { kernelDigest: "sha256:x" }, { initrdDigest: "sha256:i" }, { cmdline: "ro" }, { vcpus: 2 }, { memoryMiB: 1024 }, { scratchBytes: 1 }, { network: false }, { vmm: "qemu:kvm" }]) {
      assert.notEqual(snapshotKey({ ...KEY_INPUT, ...change }), base, JSON.stringify(change));
    }
  });
});

describe("SnapshotStore", () => {
  it("publishes a build whole and finds it verified; concurrent creates share one build", async () => {
    const { store: s } = await store();
    const b = build();
    const [one, two] = await Promise.all([s.create(key(1), b, AbortSignal.timeout(5_000)), s.create(key(1), b, AbortSignal.timeout(5_000))]);
    assert.equal(b.calls, 1);
    assert.equal(one.dir, two.dir);
    const found = await s.find(key(1));
    assert.equal(found.found?.meta.stateBytes, "device state".length);
    assert.equal(found.found?.meta.bootMs, 3000);
    assert.deepEqual(await s.find(key(2)), {});
  });

  it("leaves nothing behind when the build fails", async () => {
    const { store: s, root } = await store();
    await assert.rejects(s.create(key(1), async () => { throw new Error("template boot failed"); }, AbortSignal.timeout(5_000)), /template boot failed/);
    assert.deepEqual(await readdir(root), []);
    assert.deepEqual(await s.find(key(1)), {});
  });

  for (const [what, damage] of [
    ["a truncated RAM file", (d: string) => truncate(join(d, "memory"), 100)],
    ["a changed device state", (d: string) => writeFile(join(d, "state"), "DEVICE STATE")],
    ["a missing scratch disk", async (d: string) => { await writeFile(join(d, "scratch.ext4"), ""); await truncate(join(d, "scratch.ext4"), 0); }],
    ["an unreadable meta.json", (d: string) => writeFile(join(d, "meta.json"), "{")],
  ] as const) {
    it(`discards a snapshot with ${what}, saying why, and deletes it`, async () => {
      const { store: s } = await store();
      const snap = await s.create(key(1), build(), AbortSignal.timeout(5_000));
      await damage(snap.dir);
      const result = await s.find(key(1));
      assert.equal(result.found, undefined);
      assert.ok(result.discarded !== undefined && result.discarded.length > 0);
      assert.deepEqual(await s.find(key(1)), {}, "a discarded snapshot stays gone");
    });
  }

  it("finds a RAM file whose bytes changed (same size) when another process opens the store, and when this one sees it rewritten", async () => {
    const { store: s, root } = await store();
    const snap = await s.create(key(1), build(), AbortSignal.timeout(5_000));
    await writeFile(snap.memoryFile, Buffer.alloc(4096, 8));
    assert.match((await s.find(key(1))).discarded ?? "", /RAM file does not match/);
    const snap2 = await s.create(key(1), build(), AbortSignal.timeout(5_000));
    const fresh = new SnapshotStore({ root, maxBytes: 1 << 30, clock: systemClock, logger: silentLogger });
    const bytes = Buffer.alloc(4096, 7);
    bytes[100] = 9;
    await writeFile(snap2.memoryFile, bytes);
    await utimes(snap2.memoryFile, new Date(0), new Date(0));
    assert.match((await fresh.find(key(1))).discarded ?? "", /RAM file does not match/);
  });

  it("keeps a snapshot published since a miss instead of building it again", async () => {
    const { store: s } = await store();
    const b = build();
    await s.create(key(1), b, AbortSignal.timeout(5_000));
    await s.create(key(1), b, AbortSignal.timeout(5_000));
    assert.equal(b.calls, 1);
  });

  it("removes only the version it was asked to: a rebuild published since stays", async () => {
    const { store: s } = await store();
    const old = (await s.find((await s.create(key(1), build(), AbortSignal.timeout(5_000))).key)).found;
    assert.ok(old !== undefined);
    await s.remove(key(1));
    await s.create(key(1), build(8192), AbortSignal.timeout(5_000));
    await s.remove(key(1), old);
    assert.ok((await s.find(key(1))).found !== undefined, "the rebuild was removed for the old version's failure");
  });

  it("refuses to link a snapshot replaced since it was found", async () => {
    const { store: s, root } = await store();
    const found = (await s.find((await s.create(key(1), build(), AbortSignal.timeout(5_000))).key)).found;
    assert.ok(found !== undefined);
    await s.remove(key(1));
    await s.create(key(1), build(8192), AbortSignal.timeout(5_000));
    const vmDir = join(root, "..", "vm-replaced");
    await mkdir(vmDir);
    await assert.rejects(s.linkInto(found, vmDir), (err: Error & { code?: string }) => err.code === "SnapshotUnreadable");
  });

  it("refuses a root QEMU 7.2 could not be handed through its shell", () => {
    assert.throws(() => new SnapshotStore({ root: "/var/lib/imp/snap shots", maxBytes: 1, clock: systemClock, logger: silentLogger }), (err: Error & { code?: string }) => err.code === "SnapshotKeyInvalid");
  });

  it("gives a restoring VM hard links that outlive the snapshot's removal", async () => {
    const { store: s, root } = await store();
    const snap = await s.create(key(1), build(), AbortSignal.timeout(5_000));
    const vmDir = join(root, "..", "vm");
    await mkdir(vmDir);
    const links = await s.linkInto(snap, vmDir);
    await s.remove(key(1));
    assert.equal((await readFile(links.statePath, "utf8")), "device state");
    assert.equal((await readFile(links.memoryFile)).length, 4096);
  });

  it("sweeps what a crash left and evicts the least recently used beyond its size", async () => {
    const { store: s, root } = await store(100 * 1024); // one snapshot (~72 KiB allocated) fits, not two
    await s.create(key(1), build(32 * 1024), AbortSignal.timeout(5_000));
    await s.create(key(2), build(32 * 1024), AbortSignal.timeout(5_000));
    await utimes(join(root, key(1)), new Date(1_000), new Date(1_000)); // key 1 used longest ago
    await mkdir(join(root, `.building-${key(3)}.abcd`));
    await writeFile(join(root, "stray"), "x");
    const { evicted } = await s.sweep();
    assert.deepEqual(evicted, [key(1)]);
    assert.deepEqual((await readdir(root)).sort(), [key(2)]);
  });

  it("sweeps a missing root without creating it (a decommissioned node's state directory stays empty)", async () => {
    const { store: s, root } = await store();
    assert.deepEqual(await s.sweep(), { evicted: [], usedBytes: 0 });
    assert.equal(existsSync(root), false);
  });

  it("does not start a build on a filesystem without room for it and its reserve, and a disk that fills while it writes leaves nothing (a real tmpfs)", async (t) => {
    if (process.getuid?.() !== 0) {
      t.skip("needs root to mount a tmpfs");
      return;
    }
    const mount = await mkdtemp(join(tmpdir(), "imp-snapshots-full-"));
    run("mount", ["-t", "tmpfs", "-o", "size=1g", "imp-full", mount]);
    try {
      const root = join(mount, "snapshots");
      const s = new SnapshotStore({ root, maxBytes: 1 << 30, clock: systemClock, logger: silentLogger });
      // 1 GiB free: a build that may take 900 MiB would leave less than the 256 MiB reserve.
      const b = build();
      await assert.rejects(s.create(key(1), b, AbortSignal.timeout(5_000), { maxBytes: 900 * 1024 * 1024 }), (err: ImpError) => {
        assert.equal(err.code, "SnapshotNoSpace");
        assert.equal(err.errorClass, "retryable");
        assert.match(err.message, /MiB free in .* a snapshot may take 900 MiB with 256 MiB left for the node's VMs/);
        return true;
      });
      assert.equal(b.calls, 0, "the build never started");
      assert.deepEqual(await readdir(root), []);
      // A build the check lets through, while another writer takes the disk: the build's write hits ENOSPC.
      let calls = 0;
      const racing: SnapshotBuilder = async (files) => {
        calls++;
        const free = (await statfs(mount)).bavail * (await statfs(mount)).bsize;
        run("fallocate", ["-l", String(free - 1024 * 1024), join(mount, "other-writer")]);
        await writeFile(files.memoryFile, Buffer.alloc(4 * 1024 * 1024, 7));
        return { bootMs: 1, saveMs: 1 };
      };
      await assert.rejects(s.create(key(2), racing, AbortSignal.timeout(5_000), { maxBytes: 4096 }), (err: ImpError) => {
        assert.equal(err.code, "SnapshotNoSpace");
        assert.match(err.message, /ran out of space while it was written \(ENOSPC: no space left on device, write\); nothing of it was kept/);
        return true;
      });
      assert.equal(calls, 1);
      assert.deepEqual(await readdir(root), [], "no half-written snapshot, no .building directory");
      assert.deepEqual(await s.find(key(2)), {});
      // With room again: a VMM's own words for a full disk are recognised; any other failure stays itself.
      await rm(join(mount, "other-writer"));
      const vmmSaysFull: SnapshotBuilder = () => Promise.reject(new Error("Cannot save the snapshot", { cause: new Error("Firecracker answered 400: Snapshot create error: No space left on device (os error 28)") }));
      await assert.rejects(s.create(key(3), vmmSaysFull, AbortSignal.timeout(5_000)), (err: ImpError) => err.code === "SnapshotNoSpace");
      const otherFailure: SnapshotBuilder = () => Promise.reject(new Error("the template's guest never answered"));
      await assert.rejects(s.create(key(4), otherFailure, AbortSignal.timeout(5_000)), /the template's guest never answered/);
      assert.deepEqual(await readdir(root), []);
    } finally {
      run("umount", [mount]);
      await rm(mount, { recursive: true, force: true });
    }
  });

  it("keeps a tenth of the filesystem free, at least 256 MiB", () => {
    assert.equal(snapshotDiskReserveBytes(1024 ** 3), 256 * 1024 ** 2);
    assert.equal(snapshotDiskReserveBytes(100 * 1024 ** 3), 10 * 1024 ** 3);
  });

  it("refuses a key that is not a digest (it names a directory)", async () => {
    const { store: s } = await store();
    await assert.rejects(s.find("../../etc"), (err: Error & { code?: string }) => err.code === "SnapshotKeyInvalid");
  });
});
