/**
 * One error vocabulary with a closed list per part: each part of src/ declares the codes it raises
 * in its error-codes.ts (which also makes any other code a compile error, shared/errors.ts). This
 * holds each list to its part's code: every code the part raises by name is on its list, every
 * entry on the list is still named somewhere in the part (none stale), and all are PascalCase.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";
import { AGENT_ERROR_CODES } from "../../src/agent/index.ts";
import { API_ERROR_CODES } from "../../src/api/index.ts";
import { CLI_ERROR_CODES } from "../../src/cli/error-codes.ts";
import { DEVCLUSTER_ERROR_CODES } from "../../src/devcluster/index.ts";
import { FORGE_ERROR_CODES, GITHUB_ERROR_CODES } from "../../src/forge/index.ts";
import { KUBE_ERROR_CODES } from "../../src/kube/index.ts";
import { OPERATOR_ERROR_CODES } from "../../src/operator/index.ts";
import { SHARED_ERROR_CODES } from "../../src/shared/index.ts";

const src = resolve(import.meta.dirname, "../../src");
const LISTS: Record<string, readonly string[]> = {
  agent: AGENT_ERROR_CODES,
  api: API_ERROR_CODES,
  cli: CLI_ERROR_CODES,
  devcluster: DEVCLUSTER_ERROR_CODES,
  // The forge part's closed list is its own and GitHub's client's (src/forge/github/error-codes.ts).
  forge: [...FORGE_ERROR_CODES, ...GITHUB_ERROR_CODES],
  kube: KUBE_ERROR_CODES,
  operator: OPERATOR_ERROR_CODES,
  shared: SHARED_ERROR_CODES,
};
/** A raise by name: `retryableError("Code"`, `terminalError(`, `conflictError(`, `new ImpError(class, "Code"`. */
const RAISE = /(?:retryableError|terminalError|conflictError)\(\s*"([^"]+)"|new ImpError\(\s*[^,]+,\s*"([^"]+)"/g;

async function sourcesOf(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await sourcesOf(path)));
    else if (e.name.endsWith(".ts") && !e.name.endsWith(".test.ts") && e.name !== "error-codes.ts") out.push(path);
  }
  return out;
}

describe("error codes: a closed list per part", () => {
  it("every part of src/ has a list", async () => {
    const parts = (await readdir(src, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name).sort();
    assert.deepEqual(parts, Object.keys(LISTS).sort());
  });

  for (const [part, list] of Object.entries(LISTS)) {
    it(`${part}: raises only listed codes, lists no stale one, all PascalCase`, async () => {
      const text = (await Promise.all((await sourcesOf(join(src, part))).map((f) => readFile(f, "utf8")))).join("\n");
      const raised = new Set([...text.matchAll(RAISE)].map((m) => m[1] ?? m[2] ?? ""));
      const listed = new Set(list);
      assert.deepEqual([...raised].filter((c) => !listed.has(c)).sort(), [], `raised in src/${part} but not in its error-codes.ts`);
      assert.deepEqual(list.filter((c) => !text.includes(`"${c}"`)).sort(), [], `listed in src/${part}/error-codes.ts but named nowhere in the part`);
      assert.deepEqual(list.filter((c) => !/^[A-Z][A-Za-z0-9]+$/.test(c)), [], "not PascalCase");
      assert.equal(listed.size, list.length, "listed twice");
    });
  }
});
