/**
 * mkfs runs with the project's mke2fs.conf and an explicit feature list: a node whose mke2fs
 * configuration asks for other features (here through $MKE2FS_CONFIG, as a changed /etc/mke2fs.conf
 * would) still gets the pinned filesystem.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BaseImages, fileDigestOf, ImageCache } from "../../../src/agent/image/cache/index.ts";
import { EXT4_FEATURES } from "../../../src/agent/image/ext4/index.ts";
import { layerOf } from "../../fixtures/malicious-layers/tar-layer.ts";

function features(image: string): string[] {
  const header = execFileSync("dumpe2fs", ["-h", image], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  const line = header.split("\n").find((l) => l.startsWith("Filesystem features:")) ?? "";
  return line.slice("Filesystem features:".length).trim().split(/\s+/).sort();
}

describe("mkfs pinning", () => {
  let work: string;
  const saved = process.env.MKE2FS_CONFIG;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-mkfs-pin-"));
  });
  after(async () => {
    if (saved === undefined) delete process.env.MKE2FS_CONFIG;
    else process.env.MKE2FS_CONFIG = saved;
    await rm(work, { recursive: true, force: true });
  });

  it("ignores the node's mke2fs configuration and makes exactly the pinned features", async () => {
    const hostile = join(work, "node-mke2fs.conf");
    await writeFile(hostile, "[defaults]\n\tbase_features = sparse_super,filetype\n\tinode_size = 128\n[fs_types]\n\text4 = {\n\t\tfeatures = has_journal,extent,inline_data,^metadata_csum\n\t}\n");
    process.env.MKE2FS_CONFIG = hostile;
    const guest = join(work, "imp-guest");
    await writeFile(guest, "guest", { mode: 0o755 });
    const cache = await ImageCache.open({ root: join(work, "cache"), maxBytes: 1024 ** 3 });
    const layers = [await layerOf([{ name: "etc/hostname", content: "imp\n" }])];
    const result = await new BaseImages({ cache, staging: null }).ensure({ layers, guestAgent: { path: guest, digest: await fileDigestOf(guest) } });
    assert.deepEqual(features(result.path), [...EXT4_FEATURES].sort());
  });
});
