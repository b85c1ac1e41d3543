import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { applyMergePatch, createMergePatch } from "./merge-patch.ts";

const cases: ReadonlyArray<{ name: string; before: object; after: object; patch: object | undefined }> = [
  { name: "no change", before: { a: 1, b: { c: [1, 2] } }, after: { a: 1, b: { c: [1, 2] } }, patch: undefined },
  { name: "changed scalar", before: { a: 1 }, after: { a: 2 }, patch: { a: 2 } },
  { name: "removed key", before: { a: 1, b: 2 }, after: { a: 1 }, patch: { b: null } },
  { name: "nested change keeps siblings out", before: { s: { x: 1, y: 2 } }, after: { s: { x: 1, y: 3 } }, patch: { s: { y: 3 } } },
  { name: "array replaced whole", before: { l: [1, 2] }, after: { l: [1, 2, 3] }, patch: { l: [1, 2, 3] } },
  { name: "object replaces scalar", before: { a: 1 }, after: { a: { b: 1 } }, patch: { a: { b: 1 } } },
  { name: "added nested object", before: {}, after: { status: { phase: "Running" } }, patch: { status: { phase: "Running" } } },
  { name: "undefined counts as absent", before: { a: 1 }, after: { a: undefined }, patch: { a: null } },
];

describe("createMergePatch()", () => {
  for (const c of cases) {
    it(`produces the minimal patch for ${c.name}`, () => {
      const patch = createMergePatch(c.before, c.after);
      assert.deepEqual(patch, c.patch);
      const applied = applyMergePatch(c.before, patch ?? {});
      assert.deepEqual(applied, JSON.parse(JSON.stringify(c.after)));
    });
  }
});
