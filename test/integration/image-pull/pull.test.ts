// Pulls from a real docker-registry (CNCF distribution) on loopback: tags, digests, indexes, Docker v2
// and OCI media types, gzip and zstd layers, and what the content store holds afterwards.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { FsContentStore, ImagePuller, ImageRefs, pullImage } from "../../../src/agent/image/pull/index.ts";
import { buildImage, buildIndex, buildLayer, busyboxLayer, randomLayer, writeOciLayout, type TestImage } from "../../harness/oci-image.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";

const amd64 = { os: "linux", architecture: "amd64" };

describe("image pull from a real registry", () => {
  let registry: RunningRegistry;
  let work: string;
  let busybox: TestImage;
  let multi: TestImage;
  let busyboxDigest: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-pull-"));
    registry = await startRegistry();
    busybox = buildImage([await busyboxLayer("gzip")], { platform: amd64 });
    busyboxDigest = await pushImage(registry.url, "test/busybox", "1", busybox);
    multi = buildImage(
      [
        await busyboxLayer("zstd"),
        await buildLayer([{ path: "etc/motd", content: "hello\n" }], "gzip"),
        await buildLayer([{ path: "opt/", type: "directory" }, { path: "opt/tool", content: "#!/bin/sh\necho tool\n", mode: 0o755 }], "zstd"),
        await randomLayer(256 * 1024, "none"),
      ],
      { platform: amd64 },
    );
    await pushImage(registry.url, "test/multi", "v1", multi);
  });
  after(async () => {
    await registry.stop();
    await rm(work, { recursive: true, force: true });
  });

  const freshStore = async (name: string): Promise<FsContentStore> => FsContentStore.open(join(work, name));

  it("pulls by tag and stores config, manifest and every layer verified", async () => {
    const store = await freshStore("by-tag");
    const pulled = await pullImage(`${registry.host}/test/busybox:1`, { store, platform: amd64 });
    assert.equal(pulled.reference, `${registry.host}/test/busybox:1`);
    assert.equal(pulled.manifestDigest, busyboxDigest);
    assert.equal(pulled.configDigest, busybox.config.digest);
    assert.deepEqual(pulled.layers, busybox.layers.map((l) => ({ digest: l.digest, size: l.size, mediaType: l.mediaType })));
    assert.deepEqual(pulled.config.config?.Cmd, ["/bin/sh"]);
    for (const blob of [busybox.manifest, busybox.config, ...busybox.layers]) {
      assert.equal(await store.has(blob.digest), true, `store has ${blob.digest}`);
      assert.deepEqual(await store.readBytes(blob.digest, 64 * 1024 * 1024), blob.bytes);
    }
    assert.deepEqual(await store.tempFiles(), []);
    const record = await new ImageRefs(store.root).get(pulled.reference);
    assert.equal(record?.manifestDigest, busyboxDigest);
  });

  it("pulls by digest", async () => {
    const store = await freshStore("by-digest");
    const pulled = await pullImage(`${registry.host}/test/busybox@${busyboxDigest}`, { store, platform: amd64 });
    assert.equal(pulled.manifestDigest, busyboxDigest);
    assert.equal(pulled.reference, `${registry.host}/test/busybox@${busyboxDigest}`);
    assert.equal(await store.has(busybox.layers[0]?.digest ?? ""), true);
  });

  it("rejects a digest reference whose manifest does not exist", async () => {
    const store = await freshStore("missing-digest");
    const missing = `sha256:${"0".repeat(64)}`;
    await assert.rejects(pullImage(`${registry.host}/test/busybox@${missing}`, { store, platform: amd64 }), (err: Error & { code?: string }) => {
      assert.equal(err.code, "NotFound");
      assert.match(err.message, /registry answered 404/);
      return true;
    });
  });

  it("stores gzip, zstd and uncompressed layers of a multi-layer image, in order", async () => {
    const store = await freshStore("multi");
    const events: string[] = [];
    const pulled = await pullImage(`${registry.host}/test/multi:v1`, { store, platform: amd64, onProgress: (e) => events.push(e.kind) });
    assert.deepEqual(pulled.layers.map((l) => l.mediaType), [
      "application/vnd.oci.image.layer.v1.tar+zstd",
      "application/vnd.oci.image.layer.v1.tar+gzip",
      "application/vnd.oci.image.layer.v1.tar+zstd",
      "application/vnd.oci.image.layer.v1.tar",
    ]);
    for (const layer of multi.layers) assert.deepEqual(await store.readBytes(layer.digest, 1 << 26), layer.bytes);
    assert.equal(events.filter((k) => k === "layer-done").length, 4);
    assert.ok(events.includes("layer-bytes"));
  });

  it("does not fetch layers the store already has", async () => {
    const store = await freshStore("cached");
    await pullImage(`${registry.host}/test/multi:v1`, { store, platform: amd64 });
    const events: string[] = [];
    await pullImage(`${registry.host}/test/multi:v1`, { store, platform: amd64, onProgress: (e) => events.push(e.kind) });
    assert.equal(events.filter((k) => k === "layer-cached").length, 4);
    assert.equal(events.filter((k) => k === "layer-start").length, 0);
  });

  it("pulls Docker v2 manifests and manifest lists", async () => {
    const amdImage = buildImage([await busyboxLayer("gzip", "docker")], { platform: amd64, format: "docker" });
    const armImage = buildImage([await buildLayer([{ path: "arm", content: "arm" }], "gzip", "docker")], { platform: { os: "linux", architecture: "arm64", variant: "v8" }, format: "docker" });
    const list = buildIndex([armImage, amdImage], "docker");
    const listDigest = await pushImage(registry.url, "test/docker-list", "latest", list);
    const store = await freshStore("docker");
    const pulled = await pullImage(`${registry.host}/test/docker-list`, { store, platform: amd64 });
    assert.equal(pulled.reference, `${registry.host}/test/docker-list:latest`);
    assert.equal(pulled.indexDigest, listDigest);
    assert.equal(pulled.manifestDigest, amdImage.manifest.digest);
    assert.equal(pulled.layers[0]?.mediaType, "application/vnd.docker.image.rootfs.diff.tar.gzip");
    assert.equal(await store.has(armImage.layers[0]?.digest ?? ""), false, "the other platform's layer is not fetched");
    const arm = await pullImage(`${registry.host}/test/docker-list:latest`, { store, platform: { os: "linux", architecture: "arm64" } });
    assert.equal(arm.manifestDigest, armImage.manifest.digest);
  });

  it("picks the node's platform from an OCI index and lists what is offered when none matches", async () => {
    const platforms = [
      { os: "linux", architecture: "arm", variant: "v7" },
      { os: "linux", architecture: "amd64" },
      { os: "linux", architecture: "arm64", variant: "v8" },
    ];
    const images = await Promise.all(platforms.map(async (p) => buildImage([await buildLayer([{ path: "arch", content: `${p.architecture}\n` }], "zstd")], { platform: p })));
    await pushImage(registry.url, "test/multiarch", "1", buildIndex(images));
    const store = await freshStore("index");
    const pulled = await pullImage(`${registry.host}/test/multiarch:1`, { store, platform: amd64 });
    assert.equal(pulled.manifestDigest, images[1]?.manifest.digest);
    assert.deepEqual(pulled.platform, amd64);
    const v7 = await pullImage(`${registry.host}/test/multiarch:1`, { store, platform: { os: "linux", architecture: "arm", variant: "v7" } });
    assert.equal(v7.manifestDigest, images[0]?.manifest.digest);
    await assert.rejects(pullImage(`${registry.host}/test/multiarch:1`, { store, platform: { os: "linux", architecture: "s390x" } }), (err: Error & { code?: string }) => {
      assert.equal(err.code, "NoMatchingPlatform");
      assert.match(err.message, /no image for platform linux\/s390x; it offers linux\/arm\/v7, linux\/amd64, linux\/arm64\/v8/);
      return true;
    });
  });

  it("refuses a single-platform image built for another architecture", async () => {
    const arm = buildImage([await buildLayer([{ path: "x", content: "x" }], "gzip")], { platform: { os: "linux", architecture: "arm64" } });
    await pushImage(registry.url, "test/arm-only", "1", arm);
    const store = await freshStore("arm-only");
    await assert.rejects(pullImage(`${registry.host}/test/arm-only:1`, { store, platform: amd64 }), /the image is for linux\/arm64, this node is linux\/amd64/);
  });

  it("rejects references that name no registry unless a default is configured", async () => {
    const store = await freshStore("default-registry");
    await assert.rejects(pullImage("test/busybox:1", { store, platform: amd64 }), /names no registry host/);
    const pulled = await new ImagePuller({ defaultRegistry: registry.host }).pull("test/busybox:1", { store, platform: amd64 });
    assert.equal(pulled.manifestDigest, busyboxDigest);
  });

  it("pulls a multi-platform image that skopeo pushed from an OCI layout (a third-party pusher)", async () => {
    const images = await Promise.all([amd64, { os: "linux", architecture: "arm64" }].map(async (p) =>
      buildImage([await busyboxLayer("zstd"), await buildLayer([{ path: "p", content: p.architecture }], "gzip")], { platform: p })));
    const index = buildIndex(images);
    const layout = join(work, "skopeo-src");
    await writeOciLayout(layout, index, "multi");
    execFileSync("skopeo", ["copy", "--all", "--preserve-digests", "--dest-tls-verify=false", `oci:${layout}:multi`, `docker://${registry.host}/test/skopeo:multi`], { stdio: "pipe" });
    const store = await freshStore("skopeo");
    const pulled = await pullImage(`${registry.host}/test/skopeo:multi`, { store, platform: amd64 });
    assert.equal(pulled.indexDigest, index.index.digest);
    assert.equal(pulled.manifestDigest, images[0]?.manifest.digest);
    assert.deepEqual(pulled.layers.map((l) => l.mediaType), ["application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.v1.tar+gzip"]);
  });

  it("pushes images that skopeo reads back identically (the harness writes valid OCI)", async () => {
    const raw = execFileSync("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${registry.host}/test/busybox:1`]);
    assert.deepEqual(raw, busybox.manifest.bytes);
    const layout = join(work, "layout");
    await writeOciLayout(layout, busybox, "1");
    const out = execFileSync("skopeo", ["inspect", "--raw", `oci:${layout}:1`]);
    assert.deepEqual(out, busybox.manifest.bytes);
  });
});
