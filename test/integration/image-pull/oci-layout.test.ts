/**
 * Images from local OCI layouts (`oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`), through the same puller
 * as a registry's: the platform choice, size and digest checks apply unchanged, and an archive
 * unpacks nothing but the layout's own files.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { VmImages } from "../../../src/agent/host/index.ts";
import { FsContentStore, ImagePuller, parseLayoutReference } from "../../../src/agent/image/pull/index.ts";
import { ImpError, silentLogger } from "../../../src/shared/index.ts";
import { buildImage, buildIndex, busyboxLayer, randomLayer, writeOciLayout, type TestImage } from "../../harness/oci-image.ts";

const codeOf = (err: unknown): string => (err instanceof ImpError ? err.code : String(err));

describe("images from local OCI layouts", () => {
  let work: string;
  let image: TestImage;
  let layout: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-oci-"));
    image = buildImage([await busyboxLayer(), await randomLayer(64 * 1024)]);
    layout = join(work, "busybox");
    await writeOciLayout(layout, image, "1");
  });
  after(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it("parses oci: and oci-archive: references, with and without a tag, and leaves registry references alone", () => {
    assert.deepEqual(parseLayoutReference("oci:/tmp/x:1"), { kind: "oci", path: "/tmp/x", tag: "1" });
    assert.deepEqual(parseLayoutReference("oci-archive:/tmp/x.tar"), { kind: "oci-archive", path: "/tmp/x.tar" });
    assert.equal(parseLayoutReference("127.0.0.1:5000/test/busybox:1"), undefined);
    assert.throws(() => parseLayoutReference("oci:"), (err) => codeOf(err) === "InvalidReference");
  });

  it("pulls an image from a layout directory by tag into the store, every blob verified", async () => {
    const store = await FsContentStore.open(join(work, "store-dir"));
    const pulled = await new ImagePuller({ recordRefs: false }).pull(`oci:${layout}:1`, { store });
    assert.equal(pulled.manifestDigest, image.manifest.digest);
    assert.deepEqual(pulled.layers.map((l) => l.digest), image.layers.map((l) => l.digest));
    for (const l of image.layers) assert.ok(await store.has(l.digest), `layer ${l.digest} stored`);
  });

  it("picks this machine's platform from a layout whose tag names an index", async () => {
    const arm = buildImage([await randomLayer(1024)], { platform: { os: "linux", architecture: "arm64" } });
    const dir = join(work, "multi");
    await writeOciLayout(dir, buildIndex([arm, image]), "multi");
    const pulled = await new ImagePuller({ recordRefs: false }).pull(`oci:${dir}:multi`, { store: await FsContentStore.open(join(work, "store-multi")) });
    assert.equal(pulled.manifestDigest, image.manifest.digest);
  });

  it("pulls from an oci-archive, unpacking only the layout's files (an entry outside it is skipped)", async () => {
    const archive = join(work, "busybox.tar");
    await writeFile(join(layout, "..", "escape-me"), "outside");
    execFileSync("tar", ["-cf", archive, "-C", layout, "index.json", "oci-layout", "blobs", "../escape-me"], { stdio: "ignore" });
    const before = new Set(await readdir(tmpdir()));
    const pulled = await new ImagePuller({ recordRefs: false }).pull(`oci-archive:${archive}:1`, { store: await FsContentStore.open(join(work, "store-tar")) });
    assert.equal(pulled.manifestDigest, image.manifest.digest);
    const left = (await readdir(tmpdir())).filter((n) => n.startsWith("imp-oci-archive-") && !before.has(n));
    assert.deepEqual(left, [], "the unpacked layout is removed after the pull");
  });

  it("refuses a layout whose blob does not match its digest, and one without the tag asked for", async () => {
    const dir = join(work, "tampered");
    await writeOciLayout(dir, image, "1");
    const layer = image.layers[1];
    assert.ok(layer !== undefined);
    await writeFile(join(dir, "blobs", "sha256", layer.digest.slice(7)), Buffer.alloc(layer.size, 7));
    await assert.rejects(new ImagePuller({ recordRefs: false }).pull(`oci:${dir}:1`, { store: await FsContentStore.open(join(work, "store-bad")) }), (err) => codeOf(err) === "DigestMismatch");
    await assert.rejects(new ImagePuller({ recordRefs: false }).pull(`oci:${layout}:2`, { store: await FsContentStore.open(join(work, "store-bad")) }), (err) => codeOf(err) === "NotFound" && /no single image tagged 2.*tags: 1/.test((err as Error).message));
  });

  it("is refused by a node's image cache (only imp run reads this machine's disk)", async () => {
    const agentDigest = "sha256:" + "0".repeat(64);
    const images = await VmImages.open({ root: join(work, "node"), guestAgent: { path: "/bin/true", digest: agentDigest }, cacheMaxBytes: 1 << 30, logger: silentLogger });
    await assert.rejects(images.ensure({ image: `oci:${layout}:1`, extraLayers: [] }), (err) => codeOf(err) === "InvalidReference");
    const stored = (await readdir(join(work, "node"), { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
    assert.deepEqual(stored.map((e) => e.name), [], "nothing was read into the node's store");
  });
});
