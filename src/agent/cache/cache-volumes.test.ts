/**
 * The node's cache volumes with the real mkfs.ext4, qemu-img and qemu-io: where a volume lives, its
 * newest generation, one empty generation for many VMs asking at once, names that cannot leave the
 * caches directory, held clones promoted or discarded, collection that never takes a clone's
 * generation away, and the start-up sweep.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { ImpError } from "../../shared/index.ts";
import { CacheVolumes } from "./cache-volumes.ts";
import { createEmptyGeneration } from "./cache-volume.ts";

const run = promisify(execFile);
const MIB = 1024 ** 2;
let state: string;
let n = 0;
/** A fresh VM directory, as the agent's `vm-dir` step makes one. */
const vmDir = async (): Promise<string> => {
  const dir = join(state, "vms", `vm-${++n}`);
  await mkdir(dir, { recursive: true });
  return dir;
};
/** Writes `byte` over the clone's first MiB (through its qcow2, as the VM's QEMU would). */
const write = (clone: string, backing: string, byte: number): Promise<unknown> =>
  run("qemu-io", ["--image-opts", `driver=qcow2,file.filename=${clone},backing.driver=raw,backing.file.filename=${backing}`, "-c", `write -P ${byte} 0 1M`]);
/** Whether a raw generation's first MiB is `byte` throughout. */
const holds = async (generation: string, byte: number): Promise<boolean> =>
  run("qemu-io", ["-r", "-f", "raw", "-c", `read -P ${byte} 0 1M`, generation]).then(({ stdout }) => !/Pattern verification failed/.test(stdout), () => false);

before(async () => {
  state = await mkdtemp(join(tmpdir(), "imp-cache-volumes-"));
});
after(() => rm(state, { recursive: true, force: true }));

test("VMs asking at once for a volume the node lacks share one empty generation, made once, each with its own clone and link", async () => {
  const caches = new CacheVolumes(state);
  const ref = { namespace: "ci", volume: "pool-a", sizeBytes: 64 * MIB };
  const clones = await Promise.all([1, 2, 3].map(async () => caches.cloneNewest(ref, await vmDir())));
  const dir = join(state, "caches", "ci", "pool-a", String(64 * MIB));
  assert.deepEqual(await readdir(dir), ["gen-0000000000000-empty.raw"]);
  assert.equal(caches.emptyGenerationsMade, 1, "one mkfs for three VMs");
  const inode = (await stat(join(dir, "gen-0000000000000-empty.raw"))).ino;
  for (const c of clones) {
    assert.equal((await stat(c.clone)).mode & 0o777, 0o600);
    assert.equal((await stat(c.generation)).ino, inode, "each VM's generation is a link to the volume's");
  }
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
  const dir = await vmDir();
  for (const [namespace, volume] of [["..", "v"], ["ci", "../../etc"], ["ci", "a/b"], ["CI", "v"], ["ci", ""]] as const) {
    await assert.rejects(caches.cloneNewest({ namespace, volume, sizeBytes: 64 * MIB }, dir), (err: unknown) => err instanceof ImpError && err.code === "CacheCloneFailed" && err.errorClass === "terminal", `${namespace}/${volume}`);
  }
  assert.deepEqual(await readdir(dir), []);
});

test("held clones: promotions collect old generations, yet a clone still running or held on one promotes with its bytes; a discard leaves nothing", async () => {
  const caches = new CacheVolumes(state);
  const ref = { namespace: "ci", volume: "pool-h", sizeBytes: 64 * MIB };
  const dir = caches.dirOf(ref);
  // Three VMs on the first generation; two finish and promote, which collects the first.
  const a = await vmDir();
  const ca = await caches.cloneNewest(ref, a);
  const cb = await caches.cloneNewest(ref, await vmDir());
  const cc = await caches.cloneNewest(ref, await vmDir());
  await write(ca.clone, ca.generation, 0x11);
  await write(cb.clone, cb.generation, 0x22);
  await write(cc.clone, cc.generation, 0x33);
  await caches.hold(ref, "uid-a", ca, 1);
  await caches.hold(ref, "uid-b", cb, 2);
  assert.deepEqual(await readdir(a), [], "the hold took the clone and its link out of the VM's directory");
  const held = await caches.held();
  assert.deepEqual(held.map((h) => h.uid).sort(), ["uid-a", "uid-b"]);
  const heldA = held.find((h) => h.uid === "uid-a");
  const heldB = held.find((h) => h.uid === "uid-b");
  assert.ok(heldA !== undefined && heldB !== undefined);
  await caches.settle(heldA, "1000000000001-a");
  await caches.settle(heldB, "1000000000002-b");
  assert.deepEqual((await readdir(dir)).filter((x) => x.startsWith("gen-")), ["gen-1000000000001-a.raw", "gen-1000000000002-b.raw"], "the empty generation was collected");
  assert.ok(await holds(join(dir, "gen-1000000000002-b.raw"), 0x22));
  // The third VM ran on the collected generation all along; its promotion still reads it whole.
  await caches.hold(ref, "uid-c", cc, 3);
  const heldC = (await caches.held()).find((h) => h.uid === "uid-c");
  assert.ok(heldC !== undefined);
  const promoted = await caches.settle(heldC, "1000000000003-c");
  assert.ok(promoted !== undefined && (await holds(promoted, 0x33)), "a clone of a collected generation promotes with its writes");
  assert.equal(await holds(promoted, 0x22), false, "and only its own");
  // Settling again (a crash after publishing, before the record went) takes the published one as done.
  await writeFile(join(dir, "held", "uid-c.json"), JSON.stringify(heldC));
  assert.equal(await caches.settle(heldC, "1000000000003-c"), promoted);
  // A discard removes the clone, its link and its record.
  const d = await caches.cloneNewest(ref, await vmDir());
  await caches.hold(ref, "uid-d", d, 4);
  const heldD = (await caches.held()).find((h) => h.uid === "uid-d");
  assert.ok(heldD !== undefined);
  assert.equal(await caches.settle(heldD, undefined), undefined);
  assert.deepEqual(await readdir(join(dir, "held")), []);
});

test("the start-up sweep removes partial generations and held files without a record, and nothing else", async () => {
  const caches = new CacheVolumes(state);
  const ref = { namespace: "ci", volume: "pool-s", sizeBytes: 64 * MIB };
  const dir = caches.dirOf(ref);
  await createEmptyGeneration(dir, "0000000000000-empty", ref.sizeBytes);
  await writeFile(join(dir, "gen-1.raw.ab12cd34.partial"), "half");
  const kept = await caches.cloneNewest(ref, await vmDir());
  await caches.hold(ref, "uid-kept", kept, 1);
  // A crash between moving a clone and writing its record.
  await writeFile(join(dir, "held", "uid-lost.qcow2"), "x");
  await writeFile(join(dir, "held", "uid-lost.raw"), "x");
  await writeFile(join(dir, "held", "uid-lost.json.tmp"), "{");
  const removed = await caches.sweep();
  assert.deepEqual(removed.map((p) => p.slice(dir.length + 1)).sort(), ["gen-1.raw.ab12cd34.partial", "held/uid-lost.json.tmp", "held/uid-lost.qcow2", "held/uid-lost.raw"]);
  assert.deepEqual((await readdir(dir)).sort(), ["gen-0000000000000-empty.raw", "held"]);
  assert.deepEqual((await readdir(join(dir, "held"))).sort(), ["uid-kept.json", "uid-kept.qcow2", "uid-kept.raw"]);
});
