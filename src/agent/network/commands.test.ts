import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../../shared/index.ts";
import { commandRunner } from "./commands.ts";

const code = (expected: string, errorClass: string) => (err: unknown): boolean => {
  assert.ok(err instanceof ImpError, String(err));
  assert.equal(err.code, expected);
  assert.equal(err.errorClass, errorClass);
  return true;
};

describe("commandRunner", () => {
  const runner = commandRunner({ timeoutMs: 5_000 });

  it("returns stdout and feeds stdin", async () => {
    assert.equal((await runner.run(["cat"], { input: "table inet imp {}\n" })).stdout, "table inet imp {}\n");
  });

  it("fails with NetworkCommandFailed carrying stderr, or returns the failure when allowed", async () => {
    await assert.rejects(runner.run(["sh", "-c", "echo 'Error: no such table' >&2; exit 1"]), (err: unknown) => {
      code("NetworkCommandFailed", "retryable")(err);
      assert.match((err as Error).message, /^Cannot run sh -c .*: Error: no such table$/);
      return true;
    });
    const result = await runner.run(["sh", "-c", "echo gone >&2; exit 2"], { allowFailure: true });
    assert.deepEqual(result, { code: 2, stdout: "", stderr: "gone\n" });
  });

  it("kills a command at its timeout (NetworkCommandTimeout)", async () => {
    await assert.rejects(commandRunner({ timeoutMs: 200 }).run(["sleep", "30"]), code("NetworkCommandTimeout", "retryable"));
  });

  it("reports a missing tool as terminal NetworkToolMissing", async () => {
    await assert.rejects(runner.run(["imp-no-such-tool-xyz"]), code("NetworkToolMissing", "terminal"));
  });
});
