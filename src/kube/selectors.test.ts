import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../shared/index.ts";
import { matchesFields, matchesLabels, parseFieldSelector, parseLabelSelector } from "./selectors.ts";

describe("label selectors", () => {
  const labels = { app: "web", "imp.dev/pool": "small", tier: "" };
  const table: Array<[selector: string, matches: boolean]> = [
    ["", true],
    ["app=web", true],
    ["app = web", true],
    ["app==web", true],
    ["app!=web", false],
    ["app!=db", true],
    ["missing!=x", true],
    ["app in (db, web)", true],
    ["app in (db)", false],
    ["missing in (x)", false],
    ["app notin (db)", true],
    ["missing notin (x)", true],
    ["imp.dev/pool", true],
    ["!imp.dev/pool", false],
    ["! missing", true],
    ["tier=", true],
    ["app=web,imp.dev/pool in (small,large),!missing", true],
    ["app=web,imp.dev/pool=large", false],
  ];
  for (const [selector, expected] of table) {
    it(`"${selector}" ${expected ? "matches" : "does not match"}`, () => {
      assert.equal(matchesLabels(parseLabelSelector(selector), labels), expected);
    });
  }
  for (const bad of ["app in (web", "-app=web", "app=we b", "app>1", "a=b=c", "app in web", "Imp.Dev/pool=x"]) {
    it(`refuses "${bad}" as BadRequest`, () => {
      assert.throws(() => parseLabelSelector(bad), (err: unknown) => err instanceof ImpError && err.code === "BadRequest" && err.errorClass === "terminal");
    });
  }
});

describe("field selectors", () => {
  const supported = new Set(["metadata.name", "status.nodeName"]);
  const values: Record<string, string | undefined> = { "metadata.name": "vm-1", "status.nodeName": undefined };
  const table: Array<[selector: string, matches: boolean]> = [
    ["metadata.name=vm-1", true],
    ["metadata.name==vm-1", true],
    ["metadata.name!=vm-1", false],
    ["status.nodeName=", true],
    ["status.nodeName!=node-a", true],
    ["metadata.name=vm-1,status.nodeName=node-a", false],
  ];
  for (const [selector, expected] of table) {
    it(`"${selector}" ${expected ? "matches" : "does not match"}`, () => {
      assert.equal(matchesFields(parseFieldSelector(selector, supported), (f) => values[f]), expected);
    });
  }
  it("refuses unsupported fields and malformed requirements as BadRequest", () => {
    for (const bad of ["spec.size=1", "metadata.name", "metadata.name=a\\,b"]) {
      assert.throws(() => parseFieldSelector(bad, supported), (err: unknown) => err instanceof ImpError && err.code === "BadRequest", bad);
    }
  });
});
