/**
 * A three-layer image exercising every OCI rule the builder implements: whiteouts, an opaque
 * directory, hard links (within and across layers), symlinks, setuid/setgid/sticky modes, owners,
 * device nodes, a FIFO, xattrs, and a `/.imp` the image tries to own. The third layer is zstd
 * (like a runner layer added on top).
 */
import type { TarEntry } from "../../fixtures/malicious-layers/tar-layer.ts";
import { layerOf } from "../../fixtures/malicious-layers/tar-layer.ts";

const CAP_NET_RAW = Buffer.from([0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).toString("latin1");
/** cap_setuid,cap_net_raw+ep: has a 0x80 byte, which is not valid UTF-8 on its own. */
const CAP_SETUID_NET_RAW = Buffer.from([0x01, 0x00, 0x00, 0x02, 0x80, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
const OLD = new Date("2020-05-06T07:08:09Z");

export const sampleLayerEntries: readonly (readonly TarEntry[])[] = [
  [
    { name: "./", type: "directory", mode: 0o755 },
    { name: "bin/", type: "directory" },
    { name: "bin/tool", content: "#!/bin/sh\necho tool\n", mode: 0o755 },
    { name: "bin/sh", type: "symlink", linkname: "tool" },
    { name: "lib", type: "symlink", linkname: "usr/lib" },
    { name: "usr/", type: "directory" },
    { name: "usr/bin/", type: "directory" },
    { name: "usr/bin/passwd", content: "setuid binary", mode: 0o4755 },
    { name: "usr/bin/wall", content: "setgid binary", mode: 0o2755, gid: 5 },
    { name: "usr/bin/ping", content: "ping", mode: 0o755, pax: { "SCHILY.xattr.security.capability": CAP_NET_RAW } },
    { name: "usr/bin/newuidmap", content: "newuidmap", mode: 0o755, binaryXattrs: { "security.capability": CAP_SETUID_NET_RAW, "user.blob": Buffer.from([0xff, 0xfe, 0x00, 0x80, 0xc3]) } },
    { name: "etc/", type: "directory" },
    { name: "etc/config", content: "v1\n", mode: 0o640, uid: 1000, gid: 1000 },
    { name: "etc/removed", content: "gone in layer 2\n" },
    { name: "etc/keep", content: "kept\n", mtime: OLD, pax: { "SCHILY.xattr.user.origin": "layer1", "SCHILY.xattr.security.selinux": "system_u:object_r:etc_t:s0" } },
    { name: "var/cache/apt/", type: "directory" },
    { name: "var/cache/apt/old1", content: "hidden by opaque" },
    { name: "var/cache/apt/sub/old2", content: "hidden by opaque" },
    { name: "opt/app/data", content: "shared inode" },
    { name: "opt/app/data-link", type: "link", linkname: "opt/app/data" },
    { name: "tmp/", type: "directory", mode: 0o1777 },
    { name: "dev/", type: "directory" },
    { name: "dev/null", type: "character-device", devmajor: 1, devminor: 3, mode: 0o666 },
    { name: "dev/sda", type: "block-device", devmajor: 8, devminor: 0, mode: 0o660, gid: 6 },
    { name: "run/initctl", type: "fifo", mode: 0o600 },
    { name: "gone-dir/file", content: "whole directory whited out" },
    { name: "srv/", type: "directory", mode: 0o750, uid: 1000, gid: 1000 },
  ],
  [
    { name: "etc/.wh.removed" },
    { name: ".wh.gone-dir" },
    { name: "var/cache/apt/.wh..wh..opq" },
    { name: "var/cache/apt/new", content: "from layer 2" },
    { name: "etc/config", content: "v2\n", mode: 0o600, uid: 1000, gid: 1000 },
    { name: "usr/bin/passwd-hl", type: "link", linkname: "usr/bin/passwd" },
    { name: "home/user/", type: "directory", mode: 0o700, uid: 1000, gid: 1000 },
    { name: "home/user/.profile", content: "export A=1\n", uid: 1000, gid: 1000 },
    { name: "bin/sh", type: "symlink", linkname: "/bin/tool" },
    { name: "srv/", type: "directory", mode: 0o755, uid: 0, gid: 0 },
  ],
  [
    { name: "opt/runner/run.sh", content: "#!/bin/sh\nexec runner\n", mode: 0o755 },
    { name: ".imp/evil", content: "image content must not survive under /.imp" },
    { name: "lib", type: "directory" },
  ],
];

/** The layers, gzip except the top one (zstd) unless `allGzip` (umoci 0.4 cannot read zstd layers). */
export async function sampleLayers(allGzip = false): Promise<Awaited<ReturnType<typeof layerOf>>[]> {
  return Promise.all(sampleLayerEntries.map((entries, i) => layerOf(entries, i === 2 && !allGzip ? "zstd" : "gzip")));
}
