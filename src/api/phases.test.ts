import assert from "node:assert/strict";
import { test } from "node:test";
import { canTransitionVM, isTerminalVMPhase, transitionVM, VM_PHASES, VM_PHASE_TRANSITIONS } from "./index.ts";

test("canTransitionVM() allows forward moves, skips, staying put, and Failed/Terminating from any non-final phase", () => {
  assert.ok(canTransitionVM("Pending", "Scheduled"));
  assert.ok(canTransitionVM("Scheduled", "Running"), "skipping phases forward");
  assert.ok(canTransitionVM("Booting", "Booting"));
  for (const p of ["Pending", "Scheduled", "Preparing", "Booting", "Running"] as const) {
    assert.ok(canTransitionVM(p, "Failed"), `${p} → Failed`);
    assert.ok(canTransitionVM(p, "Terminating"), `${p} → Terminating`);
  }
  assert.ok(canTransitionVM("Terminating", "Succeeded"));
});

test("canTransitionVM() refuses backward moves and any move out of a final phase", () => {
  assert.equal(canTransitionVM("Running", "Booting"), false, "a VM is never booted twice");
  assert.equal(canTransitionVM("Terminating", "Running"), false);
  for (const from of ["Succeeded", "Failed"] as const) {
    for (const to of VM_PHASES) assert.equal(canTransitionVM(from, to), from === to, `${from} → ${to}`);
  }
});

test("transitionVM() throws a terminal error naming both phases on an illegal move", () => {
  assert.equal(transitionVM("Booting", "Running"), "Running");
  assert.throws(() => transitionVM("Failed", "Running"), (err: unknown) => err instanceof Error && /from phase Failed to Running: allowed are none/.test(err.message));
});

test("isTerminalVMPhase() is true exactly for phases with no way out", () => {
  for (const p of VM_PHASES) assert.equal(isTerminalVMPhase(p), VM_PHASE_TRANSITIONS[p].length === 0, p);
});
