import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, it } from "node:test";
import { processState } from "./process-state.ts";

describe("processState()", () => {
  it("says alive for this process and gone for a child that has exited and been reaped", async () => {
    assert.equal(processState(process.pid), "alive");
    const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
    const pid = child.pid ?? -1;
    await once(child, "exit");
    assert.equal(processState(pid), "gone");
  });

  it("says foreign for a process of another user (EPERM), when not running as root", { skip: process.getuid?.() === 0 ? "root may signal every process, so pid 1 is not foreign to it" : false }, () => {
    assert.equal(processState(1), "foreign");
  });

  it("says gone for ids that name process groups or no process (0, negatives, non-integers)", () => {
    for (const pid of [0, -1, -process.pid, 1.5, Number.NaN]) assert.equal(processState(pid), "gone", String(pid));
  });
});
