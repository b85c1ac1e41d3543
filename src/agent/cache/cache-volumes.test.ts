/**
 * The node's cache volumes with the real mkfs.ext4 and qemu-img: where a volume lives, its newest
 * generation, one empty generation for many VMs asking at once, names that cannot leave the
 * caches directory, and the start-up sweep.
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ImpError } from "../../shared/index.ts";
import { CacheVolumes } from "./cache-volumes.ts";
import { createEmptyGeneration } from "./cache-volume.ts";

const MIB = 1024 ** 2;
let state: string;
before(async () => {
  state = await mkdtemp(join(tmpdir(), "imp-cache-volumes-"));
});
after(() => rm(state, { recursive: true, force: true }));

test("VMs asking at once for a volume the node lacks share one empty generation, each with its own clone", async () => {
  const caches = new CacheVolumes(state);
  const ref = { namespace: "ci", volume: "pool-a", sizeBytes: 64 * MIB };
  const clones = await Promise.all([1, 2, 3].map((i) => caches.cloneNewest(ref, join(state, `vm-${i}.qcow2`))));
  const dir = join(state, "caches", "ci", "pool-a", String(64 * MIB));
  assert.deepEqual(await readdir(dir), ["gen-0000000000000-empty.raw"]);
  assert.deepEqual(new Set(clones.map((c) => c.generation)), new Set([join(dir, "gen-0000000000000-empty.raw")]));
  for (const c of clones) assert.equal((await stat(c.clone)).mode & 0o777, 0o600);
  assert.equal(await caches.newest({ ...ref, volume: "pool-b" }), undefined);
});

test("the newest generation is the one with the greatest id; a new size is a new, empty volume", async () => {
  const caches = new CacheVolumes(state);
  const ref = { namespace: "ci", volume: "pool-n", sizeBytes: 64 * MIB };
  const dir = caches.dirOf(ref);
  await createEmptyGeneration(dir, "0000000000000-empty", ref.sizeBytes);
  await createEmptyGeneration(dir, "1765000000000-a1", ref.sizeBytes);
  assert.equal(await caches.newest(ref), join(dir, "gen-1765000000000-a1.raw"));
  assert.equal(await caches.newest({ ...ref, sizeBytes: 128 * MIB }), undefined);
});

test("a namespace or volume that is not a DNS label is refused, so no name leaves the caches directory", async () => {
  const caches = new CacheVolumes(state);
  for (const [namespace, volume] of [["..", "v"], ["ci", "../../etc"], ["ci", "a/b"], ["CI", "v"], ["ci", ""]] as const) {
    await assert.rejects(caches.cloneNewest({ namespace, volume, sizeBytes: 64 * MIB }, join(state, "x.qcow2")), (err: unknown) => err instanceof ImpError && err.code === "CacheCloneFailed" && err.errorClass === "terminal", `${namespace}/${volume}`);
  }
  assert.equal((await readdir(state)).includes("x.qcow2"), false);
});

test("the start-up sweep removes partial files in every volume and nothing else", async () => {
  const caches = new CacheVolumes(state);
  const ref = { namespace: "ci", volume: "pool-s", sizeBytes: 64 * MIB };
  const dir = caches.dirOf(ref);
  await createEmptyGeneration(dir, "0000000000000-empty", ref.sizeBytes);
  await writeFile(join(dir, "gen-1.raw.ab12cd34.partial"), "half");
  const removed = await caches.sweep();
  assert.ok(removed.includes(join(dir, "gen-1.raw.ab12cd34.partial")), removed.join(", "));
  assert.deepEqual(await readdir(dir), ["gen-0000000000000-empty.raw"]);
});
