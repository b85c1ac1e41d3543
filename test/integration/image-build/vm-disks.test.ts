import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ImageCache } from "../../../src/agent/image/cache/index.ts";
import { prepareVmDisks, releaseVmDisks, ScratchTemplates } from "../../../src/agent/image/disks/index.ts";

describe("prepareVmDisks()", () => {
  let work: string;
  let cache: ImageCache;
  let templates: ScratchTemplates;
  const key = "a".repeat(64);
  const spec = { sizeBytes: 2 * 1024 ** 3 };

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-disks-"));
    cache = await ImageCache.open({ root: join(work, "cache"), maxBytes: 1024 ** 3 });
    templates = new ScratchTemplates(join(work, "cache", "scratch"));
    await cache.ensure(key, async ({ output }) => {
      await writeFile(output, Buffer.alloc(3 * 1024 * 1024, 5));
      return {};
    });
  });
  after(async () => rm(work, { recursive: true, force: true }));

  it("references the cached base by hard link instead of copying it", async () => {
    const vm = join(work, "vm1");
    await mkdir(vm);
    const image = await cache.lookup(key);
    assert.ok(image);
    const disks = await prepareVmDisks(vm, image, templates, spec);
    const [base, cached] = await Promise.all([stat(disks.base), stat(image.path)]);
    assert.equal(base.ino, cached.ino);
    assert.equal(cached.nlink, 2);
    assert.equal(base.mode & 0o777, 0o444);
    assert.equal((await cache.list())[0]?.inUse, true);
  });

  it("gives each VM a sparse, valid, empty ext4 scratch disk of the asked size", async () => {
    const vm = join(work, "vm2");
    await mkdir(vm);
    const image = await cache.lookup(key);
    assert.ok(image);
    const disks = await prepareVmDisks(vm, image, templates, spec);
    const info = await stat(disks.scratch);
    assert.equal(info.size, spec.sizeBytes);
    assert.ok(info.blocks * 512 < 16 * 1024 * 1024, `scratch allocates ${info.blocks * 512} bytes`);
    execFileSync("e2fsck", ["-fn", disks.scratch], { stdio: "ignore" });
    const listing = execFileSync("debugfs", ["-R", "ls -p /", disks.scratch], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    assert.deepEqual(listing.trim().split("\n").map((l) => l.split("/")[5]), [".", "..", "lost+found"]);
  });

  it("takes a ready spare scratch disk when one is waiting (a rename), and it is a valid empty ext4", async () => {
    const vm = join(work, "vm-spare");
    await mkdir(vm);
    const image = await cache.lookup(key);
    assert.ok(image);
    await templates.warm(spec);
    const disks = await prepareVmDisks(vm, image, templates, spec);
    assert.equal(disks.scratchMethod, "spare");
    assert.equal((await stat(disks.scratch)).size, spec.sizeBytes);
    execFileSync("e2fsck", ["-fn", disks.scratch], { stdio: "ignore" });
  });

  it("is idempotent and release drops the VM's reference", async () => {
    const vm = join(work, "vm3");
    await mkdir(vm);
    const image = await cache.lookup(key);
    assert.ok(image);
    await prepareVmDisks(vm, image, templates, spec);
    const again = await prepareVmDisks(vm, image, templates, spec);
    assert.equal(again.scratchMethod, "existing");
    const before = (await stat(image.path)).nlink;
    await releaseVmDisks(vm);
    assert.equal((await stat(image.path)).nlink, before - 1);
    await releaseVmDisks(vm);
  });

  it("refuses an evicted image with ImageVanished", async () => {
    const vm = join(work, "vm4");
    await mkdir(vm);
    const ghost = { key: "b".repeat(64), path: cache.pathOf("b".repeat(64)), sizeBytes: 0 };
    await assert.rejects(prepareVmDisks(vm, ghost, templates, spec), { code: "ImageVanished" });
  });
});
