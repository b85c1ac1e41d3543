/**
 * mke2fs's behaviour as the project pins it. mke2fs reads its defaults (features, inode ratio, usage
 * types) from /etc/mke2fs.conf, which differs between distributions and e2fsprogs releases (1.47 added
 * `orphan_file` and `metadata_csum_seed` to some defaults), so the same inputs could give different
 * images on two nodes. We run it with `MKE2FS_CONFIG` pointing at this file's text and an explicit
 * feature list (`-O none,…`); the config's hash and the e2fsprogs version go into the cache key.
 */
import { createHash } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { runTool } from "./run-tool.ts";

/** Features of every image we make (Debian 12's ext4 defaults, which the guest kernel mounts). */
export const EXT4_FEATURES: readonly string[] = [
  "sparse_super", "large_file", "filetype", "resize_inode", "dir_index", "ext_attr",
  "extent", "huge_file", "flex_bg", "metadata_csum", "64bit", "dir_nlink", "extra_isize",
];

/** The `-O` argument: clears whatever the configuration would add, then lists our features. */
export function featureArg(journal: boolean): string {
  return ["none", ...EXT4_FEATURES, ...(journal ? ["has_journal"] : [])].join(",");
}

/** The mke2fs.conf we run with (usage types as Debian 12 ships them; features come from `-O`). */
export const MKE2FS_CONF = `[defaults]
\tbase_features = ${EXT4_FEATURES.slice(0, 6).join(",")}
\tdefault_mntopts = acl,user_xattr
\tenable_periodic_fsck = 0
\tblocksize = 4096
\tinode_size = 256
\tinode_ratio = 16384

[fs_types]
\text4 = {
\t\tfeatures = ${EXT4_FEATURES.slice(6).join(",")}
\t}
\tsmall = {
\t\tblocksize = 1024
\t\tinode_ratio = 4096
\t}
\tfloppy = {
\t\tblocksize = 1024
\t\tinode_ratio = 8192
\t}
\tdefault = {
\t}
\tbig = {
\t\tinode_ratio = 32768
\t}
\thuge = {
\t\tinode_ratio = 65536
\t}
`;

/** Writes the config into `dir` and returns the environment for a mke2fs run that uses it. */
export async function mke2fsEnv(dir: string): Promise<NodeJS.ProcessEnv> {
  const path = join(dir, "mke2fs.conf");
  await writeFile(path, MKE2FS_CONF);
  return { ...process.env, MKE2FS_CONFIG: path };
}

let identity: Promise<string> | undefined;

/**
 * What decides how mke2fs lays out an image beyond our arguments: its version line (`mke2fs 1.47.0
 * (5-Feb-2023)`) and the sha256 of our config. Asked once per process.
 */
export function mkfsIdentity(): Promise<string> {
  identity ??= runTool("mkfs.ext4", ["-V"], { timeoutMs: 30_000 }).then(({ stdout, stderr }) => {
    const version = `${stderr}\n${stdout}`.split("\n").map((l) => l.trim()).find((l) => l.startsWith("mke2fs ")) ?? "mke2fs unknown";
    return `${version}; conf sha256:${createHash("sha256").update(MKE2FS_CONF).digest("hex")}`;
  });
  identity.catch(() => (identity = undefined));
  return identity;
}
