import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { waitFor, withDeadline } from "./deadline.ts";
import { ImpError, describeError, terminalError } from "./errors.ts";

describe("withDeadline()", () => {
  it("turns a timeout into a retryable error naming what timed out", async () => {
    const err = await withDeadline("boot the VM", 20, (signal) => new Promise((_r, reject) => signal.addEventListener("abort", () => reject(signal.reason)))).catch((e: unknown) => e);
    assert.ok(err instanceof ImpError);
    assert.equal(err.errorClass, "retryable");
    assert.equal(err.code, "Timeout");
    assert.match(err.message, /^Cannot boot the VM: no result within 20 ms/);
  });
  it("passes a parent abort through unchanged", async () => {
    const parent = new AbortController();
    parent.abort(new Error("shutting down"));
    await assert.rejects(withDeadline("x", 1_000, async (signal) => signal.throwIfAborted(), parent.signal), /shutting down/);
  });
});

describe("waitFor()", () => {
  it("returns the first defined value", async () => {
    let n = 0;
    assert.equal(await waitFor("count", () => (++n >= 3 ? n : undefined), { timeoutMs: 1_000, intervalMs: 1 }), 3);
  });
  it("stops at once when the check throws a terminal error", async () => {
    const err = await waitFor("start etcd", () => { throw terminalError("ComponentExited", "Cannot start etcd: it exited with code 1"); }, {
      timeoutMs: 10_000,
      intervalMs: 5,
    }).catch((e: unknown) => e);
    assert.ok(err instanceof ImpError);
    assert.equal(err.code, "ComponentExited");
  });
  it("reports the last error when it gives up", async () => {
    const err = await waitFor("reach it", () => { throw new Error("refused"); }, { timeoutMs: 30, intervalMs: 5 }).catch((e: unknown) => e);
    assert.match(describeError(err), /Cannot reach it.*last error: Error: refused/);
  });
});
