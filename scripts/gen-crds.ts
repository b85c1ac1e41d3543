/**
 * `npm run gen:crds`: writes deploy/crds/*.yaml and docs/api-reference.md from the TypeBox definitions
 * in src/api, and removes generated CRD files of kinds that no longer exist. The drift test fails
 * until this has been run.
 */
import { mkdir, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CRD_DIR, REFERENCE_DOC_PATH, renderCrdFiles, renderReferenceDoc } from "../src/api/index.ts";

const root = join(import.meta.dirname, "..");
const dir = join(root, CRD_DIR);
const files = renderCrdFiles();
await mkdir(dir, { recursive: true });
for (const name of await readdir(dir)) {
  if (name.endsWith(".yaml") && !files.has(name)) await rm(join(dir, name));
}
for (const [name, content] of files) await writeFile(join(dir, name), content);
await writeFile(join(root, REFERENCE_DOC_PATH), renderReferenceDoc());
process.stdout.write(`wrote ${files.size} CRDs to ${CRD_DIR}/ and ${REFERENCE_DOC_PATH}\n`);
