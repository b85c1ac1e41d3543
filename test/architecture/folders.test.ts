/**
 * docs/architecture.md places every folder of src/: a newcomer reading it can find any folder, and
 * a folder that was removed or renamed is not left described. Test data folders are not code.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";

const root = resolve(import.meta.dirname, "../..");

async function folders(dir: string, rel: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isDirectory() || entry.name === "testdata") continue;
    const path = `${rel}${entry.name}/`;
    found.push(path, ...(await folders(join(dir, entry.name), path)));
  }
  return found;
}

describe("docs/architecture.md", () => {
  it("names every folder under src/, and no folder that does not exist", async () => {
    const doc = await readFile(join(root, "docs/architecture.md"), "utf8");
    const tree = await folders(join(root, "src"), "src/");
    assert.ok(tree.length > 20, `found only ${tree.length} folders under src/`);
    const named = new Set([...doc.matchAll(/`(src\/[A-Za-z0-9/_-]+\/)`/g)].map((m) => m[1] ?? ""));
    const missing = tree.filter((f) => !named.has(f));
    assert.deepEqual(missing, [], `docs/architecture.md does not name: ${missing.join(", ")}`);
    const stale = [...named].filter((f) => !tree.includes(f));
    assert.deepEqual(stale, [], `docs/architecture.md names folders that do not exist: ${stale.join(", ")}`);
  });
});
