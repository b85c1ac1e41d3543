import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { HOST_TAG } from "./blob-writer.ts";
import { FsContentStore } from "./content-store.ts";

const digestOf = (b: Buffer): string => `sha256:${createHash("sha256").update(b).digest("hex")}`;
async function* chunks(...parts: Buffer[]): AsyncGenerator<Buffer> {
  for (const p of parts) yield p;
}

describe("FsContentStore", async () => {
  const root = await mkdtemp(join(tmpdir(), "imp-store-"));
  after(() => rm(root, { recursive: true, force: true }));
  const data = Buffer.from("hello, content store");

  it("stores a verified blob and reads it back", async () => {
    const store = await FsContentStore.open(join(root, "a"));
    await store.write({ digest: digestOf(data), size: data.length }, chunks(data.subarray(0, 5), data.subarray(5)));
    assert.equal(await store.has(digestOf(data)), true);
    assert.deepEqual(await store.readBytes(digestOf(data), 100), data);
    assert.deepEqual(await store.list(), [{ digest: digestOf(data), size: data.length }]);
    const read: Buffer[] = [];
    for await (const c of await store.openRead(digestOf(data))) read.push(c as Buffer);
    assert.deepEqual(Buffer.concat(read), data);
    assert.equal(await store.remove(digestOf(data)), true);
    assert.equal(await store.remove(digestOf(data)), false);
    await assert.rejects(store.openRead(digestOf(data)), { code: "BlobNotFound" });
  });

  it("refuses content that does not hash to the digest, keeping nothing", async () => {
    const store = await FsContentStore.open(join(root, "b"));
    const other = Buffer.from("something else, same len");
    await assert.rejects(store.write({ digest: digestOf(data), size: other.length }, chunks(other)), { code: "DigestMismatch" });
    assert.equal(await store.has(digestOf(data)), false);
    assert.deepEqual(await store.tempFiles(), []);
  });

  it("stops reading as soon as the source passes the expected size", async () => {
    const store = await FsContentStore.open(join(root, "c"));
    let pulled = 0;
    async function* endless(): AsyncGenerator<Buffer> {
      for (;;) {
        pulled++;
        yield Buffer.alloc(1024);
      }
    }
    await assert.rejects(store.write({ digest: digestOf(data), size: 4096 }, endless()), { code: "SizeMismatch", message: /more than 4096 bytes/ });
    assert.equal(pulled, 5);
    await assert.rejects(store.write({ digest: digestOf(data), size: data.length + 1 }, chunks(data)), { code: "SizeMismatch" });
    assert.deepEqual(await readdir(join(root, "c", "blobs", "sha256")), []);
  });

  it("rejects digests that are not sha256 hex before touching the disk", async () => {
    const store = await FsContentStore.open(join(root, "d"));
    await assert.rejects(store.write({ digest: "sha256:../../x", size: 1 }, chunks(data)), { code: "InvalidDigest" });
    await assert.rejects(store.write({ digest: `sha512:${"a".repeat(128)}`, size: 1 }, chunks(data)), { code: "UnsupportedDigest" });
    assert.throws(() => store.path("md5:abc"), { code: "UnsupportedDigest" });
  });

  it("does not rewrite a blob it has (the source is not read)", async () => {
    const store = await FsContentStore.open(join(root, "e"));
    await store.write({ digest: digestOf(data), size: data.length }, chunks(data));
    let read = false;
    async function* spy(): AsyncGenerator<Buffer> {
      read = true;
      yield data;
    }
    await store.write({ digest: digestOf(data), size: data.length }, spy());
    assert.equal(read, false);
  });

  it("removes temp files of dead writers and old ones on open, keeps live, recent and foreign-host ones", async () => {
    const dir = join(root, "f", "blobs", "sha256");
    await FsContentStore.open(join(root, "f"));
    const dead = `.tmp-999999999-${HOST_TAG}-dead`;
    const live = `.tmp-${process.pid}-${HOST_TAG}-live`;
    const old = `.tmp-${process.ppid}-${HOST_TAG}-old`;
    const foreign = ".tmp-999999999-0000zzzz-otherhost";
    for (const name of [dead, live, old, foreign]) await writeFile(join(dir, name), "partial");
    const hoursAgo = new Date(Date.now() - 2 * 3600 * 1000);
    await utimes(join(dir, old), hoursAgo, hoursAgo);
    const store = await FsContentStore.open(join(root, "f"));
    assert.deepEqual((await store.tempFiles()).sort(), [foreign, live].sort(), "a pid from another host's namespace proves nothing");
  });
});
