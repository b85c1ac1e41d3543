import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { rangeContinues } from "./registry-client.ts";

describe("rangeContinues", () => {
  const cases: [string | null, boolean][] = [
    ["bytes 100-999/1000", true],
    ["bytes 100-999/*", true],
    ["bytes 0-999/1000", false],
    ["bytes 100-500/1000", false],
    ["bytes 100-999/2000", false],
    ["items 100-999/1000", false],
    [null, false],
  ];
  for (const [header, expected] of cases) it(`${String(header)} → ${expected}`, () => assert.equal(rangeContinues(header, 100, 1000), expected));
});
