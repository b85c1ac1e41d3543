/**
 * xattr names travel into a debugfs script, which cannot quote `"` or `\`: such xattrs are dropped
 * and counted (like SELinux labels), and the build goes on with the others.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BaseImages, fileDigestOf, ImageCache } from "../../../src/agent/image/cache/index.ts";
import { layerOf } from "../../fixtures/malicious-layers/tar-layer.ts";
import { debugfs } from "./ext4-inspect.ts";

describe("xattrs whose names debugfs cannot quote", () => {
  let work: string;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-xattr-names-"));
  });
  after(async () => rm(work, { recursive: true, force: true }));

  it("are dropped and counted; the build succeeds and keeps the other xattrs", async () => {
    const guest = join(work, "imp-guest");
    await writeFile(guest, "guest", { mode: 0o755 });
    const cache = await ImageCache.open({ root: join(work, "cache"), maxBytes: 1024 ** 3 });
    const layer = await layerOf([{
      name: "etc/f",
      content: "x",
      pax: { 'SCHILY.xattr.user.a"b': "quote", "SCHILY.xattr.user.c\\d": "backslash", "SCHILY.xattr.user.ok": "kept" },
    }]);
    const result = await new BaseImages({ cache, staging: null }).ensure({ layers: [layer], guestAgent: { path: guest, digest: await fileDigestOf(guest) } });
    assert.equal((await cache.meta(result.key))?.droppedXattrs, 2);
    const listed = debugfs(result.path, 'ea_list "/etc/f"');
    assert.match(listed, /user\.ok \(4\) = "kept"/);
    assert.doesNotMatch(listed, /user\.a|user\.c/);
  });
});
