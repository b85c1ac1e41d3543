import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { isLoopbackRegistry, parseRetryAfter, readBounded, statusError } from "./http.ts";

describe("registry HTTP helpers", () => {
  it("parses Retry-After seconds and dates", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    assert.equal(parseRetryAfter("7", now), 7000);
    assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:30 GMT", now), 30_000);
    assert.equal(parseRetryAfter("soon", now), undefined);
    assert.equal(parseRetryAfter(null, now), undefined);
  });
  it("classifies statuses", async () => {
    const cases: [number, string, string][] = [[503, "retryable", "RegistryUnavailable"], [429, "retryable", "RegistryUnavailable"], [408, "retryable", "RegistryUnavailable"],
      [404, "terminal", "NotFound"], [403, "terminal", "Forbidden"], [400, "terminal", "RegistryRejected"]];
    for (const [status, errorClass, code] of cases) {
      const err = await statusError(new Response("", { status, headers: { "retry-after": "2" } }), "get x", 0);
      assert.equal(err.errorClass, errorClass, `${status}`);
      assert.equal(err.code, code);
      assert.equal(err.context.retryAfterMs, 2000);
    }
  });
  it("puts the registry's error code and message in the error", async () => {
    const res = new Response(JSON.stringify({ errors: [{ code: "MANIFEST_UNKNOWN", message: "manifest unknown" }] }), { status: 404 });
    assert.equal((await statusError(res, "fetch manifest r/x:1", 0)).message, "Cannot fetch manifest r/x:1: registry answered 404 (MANIFEST_UNKNOWN: manifest unknown)");
  });
  it("bounds bodies with and without Content-Length", async () => {
    await assert.rejects(readBounded(new Response("x".repeat(100), { headers: { "content-length": "100" } }), 10, "m"), /100 bytes is more than the limit of 10/);
    const chunked = new Response(new ReadableStream({ start(c) { c.enqueue(new Uint8Array(8)); c.enqueue(new Uint8Array(8)); c.close(); } }));
    await assert.rejects(readBounded(chunked, 10, "m"), /more than the limit of 10 bytes/);
    assert.equal((await readBounded(new Response("hello"), 10, "m")).byteLength, 5);
  });
  it("speaks plain HTTP only to loopback registries by default", () => {
    assert.equal(isLoopbackRegistry("127.0.0.1:5000"), true);
    assert.equal(isLoopbackRegistry("localhost"), true);
    assert.equal(isLoopbackRegistry("[::1]:80"), true);
    assert.equal(isLoopbackRegistry("127.0.0.1.evil.example"), false);
    assert.equal(isLoopbackRegistry("reg.example"), false);
  });
});
