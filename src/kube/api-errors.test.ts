import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ApiException } from "@kubernetes/client-node";
import { ImpError, terminalError } from "../shared/index.ts";
import { classifyApiError, isAlreadyExists, isConflict, isGone, isNotFound } from "./api-errors.ts";

const status = (code: number, reason: string, message = `${reason} happened`) => ({ kind: "Status", code, reason, message });
const apiException = (code: number, body: unknown) => new ApiException(code, "failed", body, {});

describe("classifyApiError()", () => {
  const table: ReadonlyArray<{ name: string; err: unknown; errorClass: string; code: string }> = [
    { name: "404 is terminal NotFound", err: apiException(404, status(404, "NotFound")), errorClass: "terminal", code: "NotFound" },
    { name: "409 AlreadyExists is a conflict", err: apiException(409, status(409, "AlreadyExists")), errorClass: "conflict", code: "AlreadyExists" },
    { name: "409 Conflict is a conflict", err: apiException(409, status(409, "Conflict")), errorClass: "conflict", code: "Conflict" },
    { name: "410 is retryable Gone", err: apiException(410, status(410, "Expired")), errorClass: "retryable", code: "Gone" },
    { name: "422 is terminal Invalid", err: apiException(422, status(422, "Invalid")), errorClass: "terminal", code: "Invalid" },
    { name: "400 is terminal", err: apiException(400, status(400, "BadRequest")), errorClass: "terminal", code: "BadRequest" },
    { name: "403 is retryable (RBAC may follow)", err: apiException(403, status(403, "Forbidden")), errorClass: "retryable", code: "Forbidden" },
    { name: "429 is retryable", err: apiException(429, status(429, "TooManyRequests")), errorClass: "retryable", code: "TooManyRequests" },
    { name: "500 is retryable", err: apiException(500, "internal"), errorClass: "retryable", code: "InternalError" },
    { name: "503 is retryable", err: apiException(503, undefined), errorClass: "retryable", code: "ServiceUnavailable" },
    { name: "an unlisted 5xx is retryable", err: apiException(507, undefined), errorClass: "retryable", code: "ServerError" },
    { name: "an unlisted 4xx is terminal", err: apiException(418, undefined), errorClass: "terminal", code: "ClientError" },
    { name: "Watch's statusCode errors are read too", err: Object.assign(new Error("Gone"), { statusCode: 410 }), errorClass: "retryable", code: "Gone" },
    {
      name: "a refused connection is a retryable network error",
      err: new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) }),
      errorClass: "retryable",
      code: "NetworkError",
    },
    { name: "a deadline is a retryable timeout", err: new DOMException("timed out", "TimeoutError"), errorClass: "retryable", code: "Timeout" },
    { name: "a caller's abort is retryable Aborted", err: new DOMException("aborted", "AbortError"), errorClass: "retryable", code: "Aborted" },
  ];
  for (const row of table) {
    it(`${row.name}`, () => {
      const err = classifyApiError(row.err, { action: "get", object: "ConfigMap ns/a" });
      assert.equal(err.errorClass, row.errorClass);
      assert.equal(err.code, row.code);
      assert.match(err.message, /^Cannot get ConfigMap ns\/a: /);
      assert.equal(err.cause, row.err, "the original error is kept as cause");
    });
  }

  it("uses the apiserver's message, also from a JSON string body", () => {
    const err = classifyApiError(apiException(422, JSON.stringify(status(422, "Invalid", 'metadata.name: Invalid value: "A_B"'))), { action: "create", object: "ConfigMap ns/A_B" });
    assert.equal(err.message, 'Cannot create ConfigMap ns/A_B: metadata.name: Invalid value: "A_B"');
  });

  it("passes ImpErrors through unchanged", () => {
    const original = terminalError("MissingNamespace", "Cannot address ConfigMap ?/a: a namespaced kind needs a namespace");
    assert.equal(classifyApiError(original, { action: "get", object: "x" }), original);
  });

  it("backs the is* predicates", () => {
    assert.equal(isNotFound(classifyApiError(apiException(404, undefined), { action: "get", object: "x" })), true);
    assert.equal(isAlreadyExists(classifyApiError(apiException(409, status(409, "AlreadyExists")), { action: "create", object: "x" })), true);
    assert.equal(isConflict(classifyApiError(apiException(409, status(409, "Conflict")), { action: "patch", object: "x" })), true);
    assert.equal(isGone(classifyApiError(apiException(410, undefined), { action: "watch", object: "x" })), true);
    assert.equal(isNotFound(new Error("404")), false);
    assert.ok(classifyApiError(new Error("odd"), { action: "get", object: "x" }) instanceof ImpError);
  });
});
