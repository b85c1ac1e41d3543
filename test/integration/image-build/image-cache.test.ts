import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { link, mkdir, mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { DEFAULT_EVICTION_GRACE_MS, ImageCache, type ImageProducer } from "../../../src/agent/image/cache/index.ts";
import { FakeClock } from "../../../src/shared/index.ts";

const run = promisify(execFile);
const key = (n: number): string => n.toString(16).padStart(64, "0");
const node = process.execPath;

describe("ImageCache", () => {
  let work: string;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-cache-"));
  });
  after(async () => rm(work, { recursive: true, force: true }));

  const producer = (bytes: number, calls: { n: number }): ImageProducer => async ({ output }) => {
    calls.n++;
    await sleep(20);
    await writeFile(output, Buffer.alloc(bytes, 1));
    return { bytes };
  };

  it("ensure() builds a key once for concurrent callers in one process", async () => {
    const cache = await ImageCache.open({ root: join(work, "single"), maxBytes: 1024 ** 3 });
    const calls = { n: 0 };
    const results = await Promise.all(Array.from({ length: 5 }, () => cache.ensure(key(1), producer(4096, calls))));
    assert.equal(calls.n, 1);
    assert.equal(new Set(results.map((r) => r.path)).size, 1);
    assert.equal((await readFile(results[0]?.path ?? "")).length, 4096);
    const again = await cache.ensure(key(1), producer(4096, calls));
    assert.equal(again.built, false);
    assert.equal(calls.n, 1);
  });

  it("publishes images read-only with their metadata", async () => {
    const cache = await ImageCache.open({ root: join(work, "meta"), maxBytes: 1024 ** 3 });
    const result = await cache.ensure(key(2), producer(100, { n: 0 }));
    assert.equal((await stat(result.path)).mode & 0o777, 0o444);
    assert.equal((await cache.meta(key(2)))?.bytes, 100);
  });

  it("ensure() builds a key once across processes (flock)", async () => {
    const root = join(work, "multi");
    const counter = join(work, "multi-counter");
    await writeFile(counter, "");
    const child = join(import.meta.dirname, "ensure-child.ts");
    const outs = await Promise.all(Array.from({ length: 3 }, () => run(node, [child, root, key(3), counter])));
    const results = outs.map((o) => JSON.parse(o.stdout) as { built: boolean; path: string });
    assert.equal((await readFile(counter, "utf8")).trim().split("\n").length, 1, "the producer ran more than once");
    assert.equal(results.filter((r) => r.built).length, 1);
    assert.equal(await readFile(results[0]?.path ?? "", "utf8"), `image of ${key(3)}`);
  });

  it("never publishes a failed build and leaves no build directory", async () => {
    const root = join(work, "failed");
    const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3 });
    await assert.rejects(cache.ensure(key(4), async ({ output }) => {
      await writeFile(output, "partial");
      throw new Error("layer 3 is malicious");
    }), /layer 3 is malicious/);
    assert.equal(await cache.lookup(key(4)), undefined);
    assert.deepEqual(await readdir(join(root, "building")), []);
    assert.deepEqual(await readdir(join(root, "images")), []);
  });

  it("never publishes a build whose process died, and the next open removes its leftovers", async () => {
    const root = join(work, "crashed");
    const counter = join(work, "crash-counter");
    await writeFile(counter, "");
    const child = join(import.meta.dirname, "ensure-child.ts");
    await assert.rejects(run(node, [child, root, key(5), counter, "crash"]));
    assert.equal((await readdir(join(root, "building"))).length, 1, "the crashed build left its directory");
    const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3 });
    assert.deepEqual(await readdir(join(root, "building")), []);
    assert.equal(await cache.lookup(key(5)), undefined);
    // The dead builder's flock is gone with it: a new build does not wait.
    const rebuilt = await cache.ensure(key(5), producer(10, { n: 0 }));
    assert.equal(rebuilt.built, true);
  });

  it("gc() evicts least-recently-used images that no VM links, down to the limit", async () => {
    const root = join(work, "gc");
    const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3 });
    const size = 64 * 1024;
    for (const n of [10, 11, 12, 13]) await cache.ensure(key(n), producer(size, { n: 0 }));
    // Ages: 10 oldest ... 13 newest; 10 is in use by a VM (hard link from its disk directory).
    for (const [i, n] of [10, 11, 12, 13].entries()) {
      const t = new Date(Date.UTC(2025, 0, 1 + i));
      await utimes(join(root, "images", key(n), "used"), t, t);
    }
    const vmDir = join(work, "gc-vm");
    await mkdir(vmDir);
    await link(cache.pathOf(key(10)), join(vmDir, "base.ext4"));
    const result = await cache.gc(2 * size);
    assert.deepEqual(result.evicted, [key(11), key(12)]);
    assert.deepEqual((await cache.list()).map((e) => e.key).sort(), [key(10), key(13)]);
    assert.equal((await cache.list()).find((e) => e.key === key(10))?.inUse, true);
    assert.deepEqual(await readdir(join(root, "trash")), []);
  });

  it("gc() removes an unused image completely, so a late VM cannot link it", async () => {
    const root = join(work, "gc-race");
    const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3, graceMs: 0 });
    const image = await cache.ensure(key(20), producer(4096, { n: 0 }));
    const vmDir = join(work, "gc-race-vm");
    await mkdir(vmDir);
    await cache.gc(0);
    assert.equal(await cache.lookup(key(20)), undefined);
    await assert.rejects(link(image.path, join(vmDir, "base.ext4")), { code: "ENOENT" });
  });

  it("gc() after building another key spares an image another caller was just handed (grace period)", async () => {
    const root = join(work, "gc-grace");
    const clock = new FakeClock(Date.UTC(2026, 0, 1));
    const size = 64 * 1024;
    const cache = await ImageCache.open({ root, maxBytes: size, clock });
    const a = await cache.ensure(key(30), producer(size, { n: 0 }));
    // Long unused: its mark is an hour old, well past the grace period.
    await clock.advance(60 * 60 * 1000);
    // Another caller (another process: its own cache object) is handed A now and has not linked it yet.
    const other = await ImageCache.open({ root, maxBytes: size, clock });
    assert.equal((await other.lookup(key(30)))?.path, a.path);
    // This process builds B; its gc would bring the cache down to one image by evicting A.
    const b = await cache.ensure(key(31), producer(size, { n: 0 }));
    assert.equal(b.built, true);
    assert.notEqual(await cache.lookup(key(30)), undefined, "A was evicted between the other caller's lookup and its link");
    const vmDir = join(work, "gc-grace-vm");
    await mkdir(vmDir);
    await link(a.path, join(vmDir, "base.ext4"));
    // Once the grace period is over, unlinked images are evicted as before.
    await clock.advance(DEFAULT_EVICTION_GRACE_MS + 1000);
    const result = await cache.gc(0);
    assert.deepEqual(result.evicted, [key(31)]);
  });

  it("gc() protects images by the age of their use mark: inside the grace period kept, past it evicted", async () => {
    const root = join(work, "gc-mtimes");
    const now = Date.UTC(2026, 0, 1, 12);
    const clock = new FakeClock(now);
    const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3, clock, graceMs: 10 * 60 * 1000 });
    for (const n of [40, 41, 42]) await cache.ensure(key(n), producer(4096, { n: 0 }));
    const minutesAgo = (m: number): Date => new Date(now - m * 60 * 1000);
    await utimes(join(root, "images", key(40), "used"), minutesAgo(5), minutesAgo(5));
    await utimes(join(root, "images", key(41), "used"), minutesAgo(9), minutesAgo(9));
    await utimes(join(root, "images", key(42), "used"), minutesAgo(11), minutesAgo(11));
    assert.deepEqual((await cache.gc(0)).evicted, [key(42)]);
    await clock.advance(2 * 60 * 1000);
    assert.deepEqual((await cache.gc(0)).evicted, [key(41)]);
  });

  it("refuses keys that are not 64 hex digits", async () => {
    const cache = await ImageCache.open({ root: join(work, "bad"), maxBytes: 1 });
    assert.throws(() => cache.ensure("../../etc", producer(1, { n: 0 })), /not 64 hex digits/);
  });
});
