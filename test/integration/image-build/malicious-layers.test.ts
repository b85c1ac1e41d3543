import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BaseImages, fileDigestOf, ImageCache } from "../../../src/agent/image/cache/index.ts";
import { defaultLayerLimits, unpackRootfs } from "../../../src/agent/image/layers/index.ts";
import { ImpError } from "../../../src/shared/index.ts";
import { maliciousCorpus } from "../../fixtures/malicious-layers/corpus.ts";
import { layerOf, rawLayerOf } from "../../fixtures/malicious-layers/tar-layer.ts";
import { snapshot } from "./fs-snapshot.ts";

describe("unpackRootfs() with the malicious-layer corpus", () => {
  let work: string;
  let guest: string;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-malicious-"));
    guest = join(work, "imp-guest");
    await writeFile(guest, "#!/bin/sh\n", { mode: 0o755 });
  });
  after(async () => rm(work, { recursive: true, force: true }));

  for (const [index, testCase] of maliciousCorpus("/CANARY").entries()) {
    const verdict = testCase.expectCode === undefined ? "succeeds without touching the canary" : `fails with ${testCase.expectCode}`;
    it(`${testCase.name}: ${verdict}`, async () => {
      const dir = join(work, `case-${index}`);
      const canary = join(dir, "canary");
      const target = join(dir, "target");
      await mkdir(canary, { recursive: true });
      await mkdir(target);
      await writeFile(join(canary, "secret"), "do not touch", { mode: 0o600 });
      // Rebuild the case with the real canary path now that it exists.
      const real = maliciousCorpus(canary)[index];
      assert.ok(real);
      const layers = await Promise.all(real.layers.map((layer) => ("raw" in layer ? Promise.resolve(rawLayerOf(layer.raw)) : layerOf(layer))));
      const before = await snapshot(canary);
      const siblings = (await readdir(dir)).sort();

      const run = unpackRootfs({ target, layers, guestAgentPath: guest, limits: { ...defaultLayerLimits(), ...real.limits } });
      if (real.expectCode === undefined) {
        await run;
        for (const path of real.expectFiles ?? []) assert.equal((await lstat(join(target, path))).isFile(), true, `${JSON.stringify(path)} is not a file`);
      } else {
        await assert.rejects(run, (err: unknown) => {
          assert.ok(err instanceof ImpError, `expected an ImpError, got ${String(err)}`);
          assert.equal(err.code, real.expectCode, err.message);
          assert.match(err.message, /^Cannot /);
          return true;
        });
      }
      assert.deepEqual(await snapshot(canary), before, "the canary outside the target changed");
      assert.deepEqual((await readdir(dir)).sort(), siblings, "something appeared beside the target");
    });
  }

  it("a malicious layer fails the whole build, which leaves no image and no partial tree", async () => {
    const root = join(work, "cache");
    const canary = join(work, "build-canary");
    await mkdir(canary);
    await writeFile(join(canary, "secret"), "x");
    const images = new BaseImages({ cache: await ImageCache.open({ root, maxBytes: 1024 ** 3 }) });
    const good = await layerOf([{ name: "bin/tool", content: "ok" }]);
    const planted = await layerOf([{ name: "esc", type: "symlink", linkname: canary }]);
    const bad = await layerOf([{ name: "esc/pwned", content: "x" }]);
    const before = await snapshot(canary);
    await assert.rejects(images.ensure({ layers: [good, planted, bad], guestAgent: { path: guest, digest: await fileDigestOf(guest) } }), { code: "LayerPathThroughSymlink" });
    assert.deepEqual(await readdir(join(root, "images")), []);
    assert.deepEqual(await readdir(join(root, "building")), []);
    assert.deepEqual(await snapshot(canary), before);
  });

  it("a file replacing a lower directory with entries below it in the same layer fails the same way every time", async () => {
    // The rule: a non-directory replaces whatever was at its path, so later entries below it have a
    // file as their ancestor (LayerPathNotDirectory). The replacement must finish, records and all,
    // before the next entry is checked: no background write may race the removal of the old tree.
    const lower = await layerOf([{ name: "P/", type: "directory" }, ...Array.from({ length: 1000 }, (_, i) => ({ name: `P/old${i}`, content: "lower" }))]);
    const upper = await layerOf([{ name: "P", content: "now a file" }, ...Array.from({ length: 50 }, (_, i) => ({ name: `P/b${i}`, content: "x" }))]);
    for (let round = 0; round < 4; round++) {
      const target = join(work, `replace-dir-${round}`);
      await mkdir(target);
      await assert.rejects(unpackRootfs({ target, layers: [lower, upper], guestAgentPath: guest, limits: defaultLayerLimits() }), (err: unknown) => {
        assert.ok(err instanceof ImpError, String(err));
        assert.equal(err.code, "LayerPathNotDirectory", err.message);
        return true;
      });
      assert.equal((await lstat(join(target, "P"))).isFile(), true);
    }
  });

  it("a file replacing a lower directory applies cleanly when nothing comes below it", async () => {
    const target = join(work, "replace-dir-ok");
    await mkdir(target);
    const lower = await layerOf([{ name: "P/", type: "directory" }, ...Array.from({ length: 500 }, (_, i) => ({ name: `P/old${i}`, content: "lower" })), { name: "P/sub/dev", type: "character-device", devmajor: 1, devminor: 3 }]);
    const upper = await layerOf([{ name: "P", content: "now a file" }, { name: "Q/b", content: "x" }]);
    const result = await unpackRootfs({ target, layers: [lower, upper], guestAgentPath: guest, limits: defaultLayerLimits() });
    assert.equal((await lstat(join(target, "P"))).isFile(), true);
    assert.equal(result.specials.has("P/sub/dev"), false, "a record of the replaced tree survived");
  });

  it("never creates a device node on the host (a placeholder stands in until the ext4 step)", async () => {
    const target = join(work, "dev-target");
    await mkdir(target);
    const layer = await layerOf([{ name: "dev/sda", type: "block-device", devmajor: 8, devminor: 0, mode: 0o666 }]);
    const result = await unpackRootfs({ target, layers: [layer], guestAgentPath: guest, limits: defaultLayerLimits() });
    const info = await lstat(join(target, "dev/sda"));
    assert.equal(info.isFile(), true);
    assert.equal(info.mode & 0o7777, 0);
    assert.deepEqual(result.specials.get("dev/sda"), { mode: 0o666, uid: 0, gid: 0, mtime: result.specials.get("dev/sda")?.mtime, kind: "block", major: 8, minor: 0 });
  });

  it("replaces an image's /.imp symlink with a real directory holding only the guest agent", async () => {
    const target = join(work, "imp-target");
    await mkdir(target);
    const layer = await layerOf([{ name: ".imp", type: "symlink", linkname: "/etc" }, { name: "etc", type: "directory" }]);
    await unpackRootfs({ target, layers: [layer], guestAgentPath: guest, limits: defaultLayerLimits() });
    assert.equal((await lstat(join(target, ".imp"))).isDirectory(), true);
    assert.deepEqual((await readdir(join(target, ".imp"))).sort(), ["imp-guest", "oldroot", "scratch"]);
    assert.equal((await lstat(join(target, ".imp/imp-guest"))).mode & 0o7777, 0o755);
  });
});
