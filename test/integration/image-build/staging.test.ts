import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BaseImages, fileDigestOf, ImageCache, type BuildEvent, type StagingOptions } from "../../../src/agent/image/cache/index.ts";
import { layerOf } from "../../fixtures/malicious-layers/tar-layer.ts";
import { ext4Tree } from "./ext4-inspect.ts";
import { sampleLayers } from "./sample-image.ts";

describe("BaseImages staging", () => {
  let work: string;
  let guestAgent: { path: string; digest: string };
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-staging-test-"));
    const path = join(work, "imp-guest");
    await writeFile(path, "guest", { mode: 0o755 });
    guestAgent = { path, digest: await fileDigestOf(path) };
  });
  after(async () => rm(work, { recursive: true, force: true }));

  const build = async (name: string, staging: StagingOptions | null, layers: Awaited<ReturnType<typeof sampleLayers>>) => {
    const events: BuildEvent[] = [];
    const cache = await ImageCache.open({ root: join(work, name), maxBytes: 1024 ** 3 });
    const result = await new BaseImages({ cache, staging }).ensure({ layers, guestAgent }, { onEvent: (e) => events.push(e) });
    return { result, staging: events.filter((e) => e.kind === "unpacked").map((e) => (e.kind === "unpacked" ? e.staging : "")) };
  };

  it("builds the same filesystem staged in memory and on disk", async () => {
    const layers = await sampleLayers();
    const memory = await build("memory", { dir: "/dev/shm", maxBytes: 256 * 1024 ** 2 }, layers);
    const disk = await build("disk", null, layers);
    assert.deepEqual(memory.staging, ["memory"]);
    assert.deepEqual(disk.staging, ["disk"]);
    assert.deepEqual(Object.fromEntries(ext4Tree(memory.result.path)), Object.fromEntries(ext4Tree(disk.result.path)));
  });

  it("falls back to disk when the image turns out bigger than the memory budget", async () => {
    // 4 MiB of zeros compress to a few KiB, so the guess says it fits a 1 MiB budget; it does not.
    const layers = [await layerOf([{ name: "zeros.bin", content: Buffer.alloc(4 * 1024 ** 2) }])];
    const { result, staging } = await build("fallback", { dir: "/dev/shm", maxBytes: 1024 ** 2 }, layers);
    assert.deepEqual(staging, ["disk"]);
    assert.equal(ext4Tree(result.path).get("zeros.bin")?.mode, "100644");
  });

  it("caps what an image may unpack to by the staging filesystem's free space less the reserve", async () => {
    const root = join(work, "reserve");
    const cache = await ImageCache.open({ root, maxBytes: 1024 ** 3 });
    // A reserve larger than any disk leaves no room: the first uncompressed bytes fail the build.
    const images = new BaseImages({ cache, staging: null, stagingReserveBytes: Number.MAX_SAFE_INTEGER });
    const layers = [await layerOf([{ name: "f", content: "data" }])];
    await assert.rejects(images.ensure({ layers, guestAgent }), { code: "LayerTooLarge" });
    assert.deepEqual(await readdir(join(root, "images")), []);
  });

  it("leaves no staging directory of this process behind", async () => {
    const mine = (await readdir("/dev/shm")).filter((n) => n.startsWith(`imp-staging-${process.pid}-`));
    assert.deepEqual(mine, []);
  });
});
