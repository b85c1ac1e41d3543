import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseWwwAuthenticate } from "./challenge.ts";

describe("parseWwwAuthenticate", () => {
  const cases: [string, string | null, ReturnType<typeof parseWwwAuthenticate>][] = [
    ["bearer with realm, service, scope", 'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"', [
      { scheme: "bearer", params: { realm: "https://auth.example/token", service: "registry.example", scope: "repository:a/b:pull" } },
    ]],
    ["basic", 'Basic realm="Registry Realm"', [{ scheme: "basic", params: { realm: "Registry Realm" } }]],
    ["scope with commas inside quotes", 'Bearer realm="r",scope="repository:a:pull,push"', [{ scheme: "bearer", params: { realm: "r", scope: "repository:a:pull,push" } }]],
    ["two challenges", 'Basic realm="x", Bearer realm="y",service="s"', [
      { scheme: "basic", params: { realm: "x" } },
      { scheme: "bearer", params: { realm: "y", service: "s" } },
    ]],
    ["unquoted values and odd case", "BEARER Realm=https://t/x, Service=s", [{ scheme: "bearer", params: { realm: "https://t/x", service: "s" } }]],
    ["escaped quote", 'Bearer realm="a\\"b"', [{ scheme: "bearer", params: { realm: 'a"b' } }]],
    ["absent header", null, []],
    ["garbage", "=== ,,,", []],
  ];
  for (const [name, header, expected] of cases) {
    it(name, () => assert.deepEqual(parseWwwAuthenticate(header), expected));
  }
  it("ignores oversized headers", () => assert.deepEqual(parseWwwAuthenticate(`Bearer realm="${"a".repeat(10_000)}"`), []));
});
