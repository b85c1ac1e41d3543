import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ImpError } from "../../../shared/index.ts";
import { entryMeaning, isAtOrBelow, parseEntryPath } from "./entry-path.ts";

const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (err) {
    return err instanceof ImpError ? err.code : "not-an-ImpError";
  }
};

describe("parseEntryPath()", () => {
  it("drops '.', empty components and trailing slashes", () => {
    assert.deepEqual(parseEntryPath("./usr//bin/"), ["usr", "bin"]);
    assert.deepEqual(parseEntryPath("./"), []);
    assert.deepEqual(parseEntryPath("."), []);
    assert.deepEqual(parseEntryPath("a/./b"), ["a", "b"]);
  });

  it("keeps names that merely contain dots", () => {
    assert.deepEqual(parseEntryPath("a/..b/...c/.d"), ["a", "..b", "...c", ".d"]);
  });

  for (const name of ["../x", "a/../../x", "a/..", "..", "./../x"]) {
    it(`refuses a '..' component in ${JSON.stringify(name)}`, () => assert.equal(codeOf(() => parseEntryPath(name)), "UnsafeLayerPath"));
  }

  it("refuses absolute names", () => assert.equal(codeOf(() => parseEntryPath("/etc/passwd")), "UnsafeLayerPath"));
  it("refuses NUL bytes", () => assert.equal(codeOf(() => parseEntryPath("a\0b")), "UnsafeLayerPath"));
  it("refuses a component over 255 bytes", () => assert.equal(codeOf(() => parseEntryPath(`d/${"é".repeat(128)}`)), "UnsafeLayerPath"));
  it("accepts a component of exactly 255 bytes", () => assert.equal(parseEntryPath("a".repeat(255))[0]?.length, 255));
  it("refuses a path over 4095 bytes", () => assert.equal(codeOf(() => parseEntryPath("abc/".repeat(1024))), "UnsafeLayerPath"));
  it("names the entry in the error message", () => {
    assert.throws(() => parseEntryPath("../etc/shadow"), /Cannot apply layer entry "\.\.\/etc\/shadow": it contains a '\.\.' component/);
  });
});

describe("entryMeaning()", () => {
  it("reads a whiteout as the path it hides", () => assert.deepEqual(entryMeaning("etc/.wh.passwd"), { kind: "whiteout", path: ["etc", "passwd"] }));
  it("reads an opaque marker as its directory", () => assert.deepEqual(entryMeaning("var/cache/.wh..wh..opq"), { kind: "opaque", dir: ["var", "cache"] }));
  it("reads a top-level opaque marker as the root", () => assert.deepEqual(entryMeaning(".wh..wh..opq"), { kind: "opaque", dir: [] }));
  it("ignores AUFS bookkeeping entries", () => assert.deepEqual(entryMeaning(".wh..wh.plnk/123"), { kind: "path", path: [".wh..wh.plnk", "123"] }));
  it("ignores AUFS bookkeeping names", () => assert.deepEqual(entryMeaning("a/.wh..wh.aufs"), { kind: "ignored" }));
  it("treats plain names as paths", () => assert.deepEqual(entryMeaning("bin/sh"), { kind: "path", path: ["bin", "sh"] }));
  for (const name of [".wh.", ".wh..", "a/.wh.."]) {
    it(`refuses the whiteout ${JSON.stringify(name)}`, () => assert.equal(codeOf(() => entryMeaning(name)), "UnsafeLayerPath"));
  }
  it("refuses a whiteout that climbs out", () => assert.equal(codeOf(() => entryMeaning("../x/.wh.y")), "UnsafeLayerPath"));
});

describe("isAtOrBelow()", () => {
  it("matches the path itself and descendants only", () => {
    assert.equal(isAtOrBelow("a/b", "a"), true);
    assert.equal(isAtOrBelow("a", "a"), true);
    assert.equal(isAtOrBelow("ab", "a"), false);
    assert.equal(isAtOrBelow("x", ""), true);
  });
});
