/**
 * The sample image the README's first `imp run` boots, so a newcomer needs no registry of their own:
 * busybox (Debian's busybox-static) as an OCI image layout, tag `1`, at the directory given
 * (`$IMP_CACHE/images/busybox`). Built with the same image builder the tests use; rebuilt only when
 * /bin/busybox changes (its digest is the key), and moved into place whole.
 *
 *   node scripts/build/sample-image.ts DIR
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import { buildImage, busyboxLayer, writeOciLayout } from "../../test/harness/oci-image.ts";

const dir = process.argv[2];
if (dir === undefined) throw new Error("usage: node scripts/build/sample-image.ts DIR");
const key = createHash("sha256").update(await readFile("/bin/busybox")).digest("hex");
const keyFile = `${dir}/.key`;
if (existsSync(keyFile) && (await readFile(keyFile, "utf8")) === key) {
  process.stdout.write(`${dir}\n`);
  process.exit(0);
}
const staging = `${dir}.tmp-${process.pid}`;
await rm(staging, { recursive: true, force: true });
await writeOciLayout(staging, buildImage([await busyboxLayer()], { cmd: ["/bin/sh"] }), "1");
await writeFile(`${staging}/.key`, key);
await rm(dir, { recursive: true, force: true });
await rename(staging, dir);
process.stdout.write(`${dir}\n`);
