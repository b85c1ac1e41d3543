import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BaseImages, fileDigestOf, ImageCache } from "../../../src/agent/image/cache/index.ts";
import { buildImage, writeOciLayout } from "../../harness/oci-image.ts";
import { debugfs, ext4Metadata, ext4Tree, hostTree, type NodeRecord } from "./ext4-inspect.ts";
import { sampleLayers } from "./sample-image.ts";

describe("BaseImages.ensure() on a multi-layer image", () => {
  let work: string;
  let image: string;
  let images: BaseImages;
  let guest: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-build-"));
    guest = join(work, "imp-guest");
    await writeFile(guest, "#!/bin/sh\necho guest\n", { mode: 0o755 });
    const layers = await sampleLayers();
    const cache = await ImageCache.open({ root: join(work, "cache"), maxBytes: 1024 ** 3 });
    images = new BaseImages({ cache });
    const result = await images.ensure({ layers, guestAgent: { path: guest, digest: await fileDigestOf(guest) } });
    assert.equal(result.built, true);
    image = result.path;
  });
  after(async () => rm(work, { recursive: true, force: true }));

  const stat = (path: string): string => debugfs(image, `stat "${path}"`);
  const cat = (path: string): string => debugfs(image, `cat "${path}"`);

  it("passes e2fsck without changes", () => {
    execFileSync("e2fsck", ["-fn", image], { stdio: "ignore" });
  });

  it("applies whiteouts of files and whole directories", () => {
    const meta = ext4Metadata(image);
    assert.equal(meta.has("etc/removed"), false);
    assert.equal(meta.has("gone-dir"), false);
    assert.equal(meta.has("gone-dir/file"), false);
    assert.equal(cat("/etc/keep"), "kept\n");
  });

  it("hides lower-layer content of an opaque directory but keeps its own layer's", () => {
    const meta = ext4Metadata(image);
    const apt = [...meta.keys()].filter((p) => p.startsWith("var/cache/apt/")).sort();
    assert.deepEqual(apt, ["var/cache/apt/new"]);
  });

  it("keeps setuid, setgid and sticky bits and owners", () => {
    const meta = ext4Metadata(image);
    assert.equal(meta.get("usr/bin/passwd")?.mode, 0o104755);
    assert.equal(meta.get("usr/bin/wall")?.mode, 0o102755);
    assert.equal(meta.get("usr/bin/wall")?.gid, 5);
    assert.equal(meta.get("tmp")?.mode, 0o41777);
    assert.deepEqual({ ...meta.get("home/user"), ino: 0 }, { ino: 0, mode: 0o40700, uid: 1000, gid: 1000 });
    assert.deepEqual({ ...meta.get("etc/config"), ino: 0 }, { ino: 0, mode: 0o100600, uid: 1000, gid: 1000 });
    assert.equal(cat("/etc/config"), "v2\n");
    assert.deepEqual({ ...meta.get("srv"), ino: 0 }, { ino: 0, mode: 0o40755, uid: 0, gid: 0 }, "a later layer's directory entry resets the owner");
  });

  it("keeps hard links (in one layer and across layers) as one inode", () => {
    const meta = ext4Metadata(image);
    assert.equal(meta.get("opt/app/data")?.ino, meta.get("opt/app/data-link")?.ino);
    assert.equal(meta.get("usr/bin/passwd")?.ino, meta.get("usr/bin/passwd-hl")?.ino);
    assert.match(stat("/usr/bin/passwd"), /Links: 2/);
  });

  it("keeps symlinks verbatim and lets a later layer replace them", () => {
    assert.match(stat("/bin/sh"), /Fast link dest: "\/bin\/tool"/);
    assert.equal(ext4Metadata(image).get("lib")?.mode, 0o40755);
  });

  it("creates device nodes and FIFOs inside the image with their modes and owners", () => {
    const meta = ext4Metadata(image);
    assert.equal(meta.get("dev/null")?.mode, 0o20666);
    assert.match(stat("/dev/null"), /Device major\/minor number: 01:03/);
    assert.deepEqual({ ...meta.get("dev/sda"), ino: 0 }, { ino: 0, mode: 0o60660, uid: 0, gid: 6 });
    assert.equal(meta.get("run/initctl")?.mode, 0o10600);
  });

  it("keeps file capabilities and user xattrs, drops SELinux labels", () => {
    assert.match(debugfs(image, 'ea_list "/usr/bin/ping"'), /security\.capability \(20\) = 01 00 00 02 00 20 00 00/);
    const binary = debugfs(image, 'ea_list "/usr/bin/newuidmap"');
    assert.match(binary, /security\.capability \(20\) = 01 00 00 02 80 20 00 00 00/, "binary values must survive byte-exact");
    assert.match(binary, /user\.blob \(5\) = ff fe 00 80 c3/);
    const keep = debugfs(image, 'ea_list "/etc/keep"');
    assert.match(keep, /user\.origin \(6\) = "layer1"/);
    assert.doesNotMatch(keep, /selinux/);
  });

  it("keeps mtimes of files and directories", () => {
    assert.match(stat("/etc/keep"), /mtime: 0x5eb26259/);
    assert.match(stat("/usr/bin"), /mtime: 0x65937d25/);
    assert.match(stat("/dev"), /mtime: 0x65937d25/, "making device nodes inside the image must not change their directory's mtime");
  });

  it("has the directories the guest agent mounts over before its overlay exists", () => {
    const meta = ext4Metadata(image);
    for (const dir of ["dev", "proc", "sys", "run", "tmp"]) assert.equal(((meta.get(dir)?.mode ?? 0) & 0o170000), 0o040000, dir);
    assert.equal(meta.get("tmp")?.mode, 0o41777, "an image's own /tmp is kept as it is");
  });

  it("holds only the guest agent (and its two mount points) under /.imp, root-owned", () => {
    const meta = ext4Metadata(image);
    assert.deepEqual([...meta.keys()].filter((p) => p.startsWith(".imp/")).sort(), [".imp/imp-guest", ".imp/oldroot", ".imp/scratch"]);
    assert.deepEqual({ ...meta.get(".imp/imp-guest"), ino: 0 }, { ino: 0, mode: 0o100755, uid: 0, gid: 0 });
    assert.equal(cat("/.imp/imp-guest"), "#!/bin/sh\necho guest\n");
  });

  it("matches what umoci unpacks from the same image, path by path", async () => {
    const layers = await sampleLayers(true);
    const gzipImage = (await images.ensure({ layers, guestAgent: { path: guest, digest: await fileDigestOf(guest) } })).path;
    const layout = join(work, "layout");
    await writeOciLayout(layout, buildImage(layers), "sample");
    const bundle = join(work, "bundle");
    execFileSync("umoci", ["unpack", "--image", `${layout}:sample`, bundle], { stdio: "ignore" });
    // Ours adds lost+found (mkfs), /.imp and the guest's mount points the sample image lacks.
    const ours = without(ext4Tree(gzipImage), ["lost+found", ".imp", "proc", "sys", "run"]);
    const theirs = without(hostTree(join(bundle, "rootfs")), [".imp", "proc", "sys", "run"]);
    assert.deepEqual(Object.fromEntries(ours), Object.fromEntries(theirs));
    assert.ok(ours.size > 25, `compared only ${ours.size} paths`);
  });

  it("leaves nothing behind in the cache's build area", async () => {
    assert.deepEqual(await readdir(join(work, "cache", "building")), []);
  });
});

function without(tree: Map<string, NodeRecord>, tops: readonly string[]): Map<string, NodeRecord> {
  return new Map([...tree].filter(([path]) => !tops.some((top) => path === top || path.startsWith(`${top}/`))));
}
