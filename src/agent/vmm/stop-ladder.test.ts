import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { VmExit, VmmProcess } from "./types.ts";
import { climbStopLadder } from "./stop-ladder.ts";

/** A process that exits on the signals it is told to honour, and records what it was sent. */
function process(honours: readonly NodeJS.Signals[], running = true): VmmProcess & { readonly sent: NodeJS.Signals[] } {
  let exit: VmExit | undefined = running ? undefined : { code: 0, signal: null };
  let resolve: (e: VmExit) => void = () => undefined;
  const exited = new Promise<VmExit>((r) => (resolve = r));
  if (exit !== undefined) resolve(exit);
  const sent: NodeJS.Signals[] = [];
  const signal = (s: NodeJS.Signals): void => {
    sent.push(s);
    if (exit === undefined && (honours.includes(s) || s === "SIGKILL")) resolve((exit = { code: null, signal: s }));
  };
  return {
    name: "vmm", pid: 1, sent, exited: () => exited, get running() { return exit === undefined; }, signal,
    stop: async () => {
      signal("SIGTERM");
      signal("SIGKILL");
      return exited;
    },
  };
}

describe("climbStopLadder()", () => {
  it("stops at the graceful rung when the VMM honours it, and cleans up after", async () => {
    const p = process(["SIGTERM"]);
    let cleaned = false;
    const { exit, report } = await climbStopLadder({ process: p, graceful: async () => p.signal("SIGTERM"), graceMs: 5_000, killGraceMs: 0, cleanup: async () => void (cleaned = true) });
    assert.equal(report.rung, "graceful");
    assert.equal(exit.signal, "SIGTERM");
    assert.equal(report.killMs, 0);
    assert.ok(cleaned);
  });

  it("kills a VMM that ignores the graceful request once the grace has passed", async () => {
    const p = process([]);
    const { exit, report } = await climbStopLadder({ process: p, graceful: async () => p.signal("SIGINT"), graceMs: 20, killGraceMs: 0, cleanup: async () => undefined });
    assert.equal(report.rung, "killed");
    assert.equal(exit.signal, "SIGKILL");
    assert.deepEqual(p.sent, ["SIGINT", "SIGTERM", "SIGKILL"]);
  });

  it("climbs on when the graceful request itself fails, and says so", async () => {
    const p = process([]);
    const failures: unknown[] = [];
    const { report } = await climbStopLadder({ process: p, graceful: () => Promise.reject(new Error("API gone")), graceMs: 10, killGraceMs: 0, cleanup: async () => undefined, onGracefulFailed: (err) => failures.push(err) });
    assert.equal(report.rung, "killed");
    assert.equal(failures.length, 1);
  });

  it("reports already-exited for a VMM that was gone, sending nothing", async () => {
    const p = process([], false);
    const { report } = await climbStopLadder({ process: p, graceful: async () => p.signal("SIGTERM"), graceMs: 10, killGraceMs: 0, cleanup: async () => undefined });
    assert.equal(report.rung, "already-exited");
    assert.deepEqual(p.sent, []);
  });
});
