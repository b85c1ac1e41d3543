/**
 * The runner images the repository builds for the VMs: a Debian root filesystem made at set-up
 * (scripts/setup.d/58-runner-rootfs.sh, from images/<name>/packages.txt) plus the image's own
 * files from images/<name>/. Layers as the test registry helpers take them.
 */
import { existsSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { blobOf, buildLayer, type Blob } from "./oci-image.ts";

const root = resolve(import.meta.dirname, "../..");
const cacheDir = process.env["IMP_CACHE"] ?? join(root, ".cache");
const GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip";

/** Why the root filesystem of image `name` is not there, or undefined. */
export function rootfsUnavailable(name: string): string | undefined {
  const dir = join(cacheDir, "rootfs", name);
  return existsSync(join(dir, "layer.tar.gz")) ? undefined : `the ${name} root filesystem is missing at ${dir}: npm run setup builds it (scripts/setup.d/58-runner-rootfs.sh)`;
}

/** The Debian root filesystem of image `name` as one gzip layer (read from the build cache, digests checked). */
export async function rootfsLayer(name: string): Promise<Blob & { diffId: string }> {
  const dir = join(cacheDir, "rootfs", name);
  const why = rootfsUnavailable(name);
  if (why !== undefined) throw new Error(why);
  const bytes = await readFile(join(dir, "layer.tar.gz"));
  const blob = blobOf(GZIP_LAYER, bytes);
  const digest = readFileSync(join(dir, "layer.digest"), "utf8").trim();
  if (blob.digest !== `sha256:${digest}`) throw new Error(`the ${name} root filesystem layer does not match its recorded digest: rebuild it (rm -r ${dir}; npm run setup)`);
  return { ...blob, diffId: `sha256:${readFileSync(join(dir, "layer.diffid"), "utf8").trim()}` };
}

/** The Gitea runner image's own layer: gitea-runner and the VM's entry point (images/gitea-runner/run.sh). */
export async function giteaRunnerLayer(runnerBinary: string): Promise<Blob & { diffId: string }> {
  return buildLayer([
    { path: "usr/local/bin/gitea-runner", content: await readFile(runnerBinary), mode: 0o755 },
    { path: "runner/", type: "directory" },
    { path: "runner/run.sh", content: await readFile(join(root, "images/gitea-runner/run.sh")), mode: 0o755 },
  ]);
}
