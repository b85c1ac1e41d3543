import assert from "node:assert/strict";
import { describe, it, test } from "node:test";
import { ApiException, dumpYaml } from "@kubernetes/client-node";
import { parse } from "yaml";
import { buildAllCrds } from "../api/index.ts";
import { classifyApplyError, toClientModel } from "./install-crds.ts";

test("toClientModel() survives the client's serializer: what is sent equals the generated CRD", () => {
  for (const crd of buildAllCrds()) {
    const sent: unknown = parse(dumpYaml(toClientModel(crd)));
    assert.deepEqual(sent, JSON.parse(JSON.stringify(crd)), crd.metadata.name);
  }
});

describe("classifyApplyError()", () => {
  const status = (code: number, reason: string, message: string) =>
    new ApiException(code, "HTTP", JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", code, reason, message }), {});

  it("classifies through classifyApiError: 422 is a terminal CrdRejected carrying the server's reason", () => {
    const err = classifyApplyError(status(422, "Invalid", 'spec.x: Invalid value: "y"'), "impvms.imp.dev");
    assert.equal(err.errorClass, "terminal");
    assert.equal(err.code, "CrdRejected");
    assert.equal(err.context["apiCode"], "Invalid");
    assert.equal(err.message, 'Cannot apply CRD impvms.imp.dev: spec.x: Invalid value: "y"');
  });

  it("keeps the API classes for conflicts, overload and network failures", () => {
    const conflict = classifyApplyError(status(409, "Conflict", "the object has been modified"), "a");
    assert.deepEqual([conflict.errorClass, conflict.code], ["conflict", "Conflict"]);
    const busy = classifyApplyError(status(429, "TooManyRequests", "slow down"), "a");
    assert.deepEqual([busy.errorClass, busy.code], ["retryable", "TooManyRequests"]);
    const down = classifyApplyError(status(503, "ServiceUnavailable", "etcd leader changed"), "a");
    assert.deepEqual([down.errorClass, down.code], ["retryable", "ServiceUnavailable"]);
    const refused = classifyApplyError(new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } }), "a");
    assert.deepEqual([refused.errorClass, refused.code], ["retryable", "NetworkError"]);
    assert.match(refused.message, /^Cannot apply CRD a: connection failed \(ECONNREFUSED\)$/);
  });
});
