/**
 * The build verifies the bytes it applies against the digests in the cache key: a store blob corrupted
 * after the pull, a `--layer` file changed after its digest was taken, or a guest agent replaced after
 * it was hashed fails the build with `DigestMismatch`, and nothing is published under the key.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { chmod, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { BaseImages, fileDigestOf, ImageCache } from "../../../src/agent/image/cache/index.ts";
import { layerBlobsOf, localLayer, type LayerBlob } from "../../../src/agent/image/layers/index.ts";
import type { PulledImage } from "../../../src/agent/image/pull/index.ts";
import { FsContentStore } from "../../../src/agent/image/store/index.ts";
import { layerOf } from "../../fixtures/malicious-layers/tar-layer.ts";

describe("BaseImages.ensure() verifies what it applies", () => {
  let work: string;
  let guest: string;
  let n = 0;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-verify-"));
    guest = join(work, "imp-guest");
    await writeFile(guest, "#!/bin/sh\necho guest\n", { mode: 0o755 });
  });
  after(async () => rm(work, { recursive: true, force: true }));

  const freshCache = async (): Promise<{ images: BaseImages; root: string }> => {
    const root = join(work, `cache-${n++}`);
    return { images: new BaseImages({ cache: await ImageCache.open({ root, maxBytes: 1024 ** 3 }), staging: null }), root };
  };

  async function assertNothingPublished(root: string): Promise<void> {
    assert.deepEqual(await readdir(join(root, "images")), []);
    assert.deepEqual(await readdir(join(root, "building")), []);
  }

  async function storedLayer(store: FsContentStore): Promise<LayerBlob> {
    const layer = await layerOf([{ name: "bin/tool", content: "the real tool\n".repeat(100) }]);
    await store.write({ digest: layer.digest, size: layer.size }, Readable.from([layer.bytes]));
    const pulled = { layers: [{ digest: layer.digest, size: layer.size, mediaType: layer.mediaType }] } as unknown as PulledImage;
    const [blob] = layerBlobsOf(pulled, store);
    assert.ok(blob);
    return blob;
  }

  it("a store blob corrupted after the pull (one byte flipped) fails with DigestMismatch", async () => {
    const store = await FsContentStore.open(join(work, `store-${n++}`));
    const blob = await storedLayer(store);
    const path = store.path(blob.digest);
    const bytes = readFileSync(path);
    const at = Math.floor(bytes.length / 2);
    bytes.writeUInt8((bytes.readUInt8(at) ^ 0xff), at);
    await chmod(path, 0o644);
    await writeFile(path, bytes);
    const { images, root } = await freshCache();
    await assert.rejects(images.ensure({ layers: [blob], guestAgent: { path: guest, digest: await fileDigestOf(guest) } }), (err: Error & { code?: string }) => {
      assert.equal(err.code, "DigestMismatch", err.message);
      assert.match(err.message, /^Cannot use layer sha256:/);
      return true;
    });
    await assertNothingPublished(root);
  });

  it("a store blob replaced by another valid layer fails with DigestMismatch (the tar itself is fine)", async () => {
    const store = await FsContentStore.open(join(work, `store-${n++}`));
    const blob = await storedLayer(store);
    const other = await layerOf([{ name: "bin/tool", content: "a trojan\n" }]);
    await chmod(store.path(blob.digest), 0o644);
    await writeFile(store.path(blob.digest), other.bytes);
    const { images, root } = await freshCache();
    await assert.rejects(images.ensure({ layers: [blob], guestAgent: { path: guest, digest: await fileDigestOf(guest) } }), { code: "DigestMismatch" });
    await assertNothingPublished(root);
  });

  it("a --layer file changed between key computation and apply fails; the right bytes then build", async () => {
    const file = join(work, "runner.tar.gz");
    const original = await layerOf([{ name: "opt/runner/run.sh", content: "#!/bin/sh\nexec runner\n", mode: 0o755 }]);
    await writeFile(file, original.bytes);
    const layer = await localLayer(file);
    assert.equal(layer.digest, original.digest);
    await writeFile(file, (await layerOf([{ name: "opt/runner/run.sh", content: "#!/bin/sh\nexec evil\n", mode: 0o755 }])).bytes);
    const { images, root } = await freshCache();
    const request = { layers: [layer], guestAgent: { path: guest, digest: await fileDigestOf(guest) } };
    await assert.rejects(images.ensure(request), { code: "DigestMismatch" });
    await assertNothingPublished(root);
    await writeFile(file, original.bytes);
    const built = await images.ensure(request);
    assert.equal(built.built, true);
    assert.equal(built.key, await images.keyOf(request));
  });

  it("a guest agent replaced after it was hashed fails with DigestMismatch", async () => {
    const agent = join(work, "imp-guest-2");
    await writeFile(agent, "#!/bin/sh\necho v1\n", { mode: 0o755 });
    const digest = await fileDigestOf(agent);
    await writeFile(agent, "#!/bin/sh\necho v2\n", { mode: 0o755 });
    const { images, root } = await freshCache();
    const layer = await layerOf([{ name: "bin/tool", content: "x" }]);
    await assert.rejects(images.ensure({ layers: [layer], guestAgent: { path: agent, digest } }), (err: Error & { code?: string }) => {
      assert.equal(err.code, "DigestMismatch", err.message);
      assert.match(err.message, /guest agent/);
      return true;
    });
    await assertNothingPublished(root);
  });
});
