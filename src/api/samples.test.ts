import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";
import { Value } from "@sinclair/typebox/value";
import { parse } from "yaml";
import { API_VERSION, KIND_DEFINITIONS } from "./index.ts";

const dir = join(import.meta.dirname, "../../deploy/samples");

test("every sample in deploy/samples matches its kind's TypeScript schema once defaults are applied", async () => {
  const files = (await readdir(dir)).filter((f) => f.endsWith(".yaml"));
  assert.ok(files.length >= 5);
  const kinds = new Set<string>();
  for (const file of files) {
    const obj = parse(await readFile(join(dir, file), "utf8")) as { apiVersion: string; kind: string; spec: unknown };
    assert.equal(obj.apiVersion, API_VERSION, file);
    const def = KIND_DEFINITIONS.find((d) => d.names.kind === obj.kind);
    assert.ok(def, `${file}: unknown kind ${obj.kind}`);
    kinds.add(obj.kind);
    const spec = Value.Default(def.spec, structuredClone(obj.spec));
    const errors = [...Value.Errors(def.spec, spec)].map((e) => `${e.path}: ${e.message}`);
    assert.deepEqual(errors, [], file);
  }
  assert.deepEqual([...kinds].sort(), KIND_DEFINITIONS.map((d) => d.names.kind).sort(), "a sample for every kind");
});
