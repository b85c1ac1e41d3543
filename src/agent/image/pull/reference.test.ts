import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatReference, parseReference } from "./reference.ts";

const digest = `sha256:${"a".repeat(64)}`;

describe("parseReference", () => {
  const ok: [string, ReturnType<typeof parseReference>][] = [
    ["127.0.0.1:5000/team/app:1.2", { registry: "127.0.0.1:5000", repository: "team/app", tag: "1.2" }],
    ["localhost/app", { registry: "localhost", repository: "app", tag: "latest" }],
    [`reg.example/app@${digest}`, { registry: "reg.example", repository: "app", digest }],
    [`reg.example/app:v1@${digest}`, { registry: "reg.example", repository: "app", tag: "v1", digest }],
    ["[::1]:5000/a/b-c/d_e:x", { registry: "[::1]:5000", repository: "a/b-c/d_e", tag: "x" }],
  ];
  for (const [input, expected] of ok) {
    it(`parses ${input}`, () => {
      assert.deepEqual(parseReference(input), expected);
      assert.equal(formatReference(parseReference(formatReference(expected))), formatReference(expected));
    });
  }
  it("completes a registry-less reference only with a configured default", () => {
    assert.throws(() => parseReference("team/app:1"), /names no registry host/);
    assert.deepEqual(parseReference("team/app:1", "mirror.internal:5000"), { registry: "mirror.internal:5000", repository: "team/app", tag: "1" });
  });
  const bad: [string, RegExp][] = [
    ["reg.example/App:1", /lowercase path components/],
    ["reg.example/app:bad tag", /tag/],
    [`reg.example/app@sha512:${"a".repeat(128)}`, /algorithm sha512 is not supported \(only sha256\)/],
    ["reg.example/app@sha256:abc", /sha256:<64 lowercase hex>/],
    ["reg.example/../etc:1", /lowercase path components/],
    ["", /length/],
  ];
  for (const [input, message] of bad) {
    it(`rejects ${JSON.stringify(input)}`, () => assert.throws(() => parseReference(input), message));
  }
});
