import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";
import { CRD_DIR, REFERENCE_DOC_PATH, renderCrdFiles, renderReferenceDoc } from "./index.ts";

const root = join(import.meta.dirname, "../..");
const dir = join(root, CRD_DIR);
const FIX = "run `npm run gen:crds` and commit deploy/crds/";

test("committed deploy/crds/ equals what src/api generates", async () => {
  const generated = renderCrdFiles();
  const committed = (await readdir(dir)).filter((f) => f.endsWith(".yaml")).sort();
  assert.deepEqual(committed, [...generated.keys()].sort(), `deploy/crds/ holds other files than the generator writes: ${FIX}`);
  for (const [name, content] of generated) {
    const onDisk = await readFile(join(dir, name), "utf8");
    assert.ok(onDisk === content, `deploy/crds/${name} differs from the schema in src/api: ${FIX}`);
  }
});

test("committed docs/api-reference.md equals what src/api generates", async () => {
  const onDisk = await readFile(join(root, REFERENCE_DOC_PATH), "utf8");
  assert.ok(onDisk === renderReferenceDoc(), `${REFERENCE_DOC_PATH} differs from the schema in src/api: run \`npm run gen:crds\` and commit it`);
});
