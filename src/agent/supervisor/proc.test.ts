import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { livenessOf, parseProcStat, readProcStat } from "./proc.ts";

describe("parseProcStat", () => {
  it("counts fields from the last parenthesis, so a command name with spaces and ')' cannot shift them", () => {
    const line = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n";
    assert.deepEqual(parseProcStat(line), { state: "S", startTime: 987654 });
  });

  it("rejects truncated or malformed lines", () => {
    for (const line of ["", "1 (x", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 abc 1"]) {
      assert.equal(parseProcStat(line), undefined, line);
    }
  });

  it("reads this process", async () => {
    const stat = await readProcStat(process.pid);
    assert.ok(stat !== undefined && stat.startTime > 0);
  });
});

describe("livenessOf", () => {
  const ref = { pid: 10, startTime: 500 };
  it("is alive only for the same start time and a non-zombie state", () => {
    assert.equal(livenessOf(ref, { state: "S", startTime: 500 }), "alive");
    assert.equal(livenessOf(ref, { state: "Z", startTime: 500 }), "gone");
    assert.equal(livenessOf(ref, undefined), "gone");
    assert.equal(livenessOf(ref, { state: "S", startTime: 501 }), "reused");
  });
});
