import assert from "node:assert/strict";
import { test } from "node:test";
import type { ImpVMRunnerPoolStatus } from "../../api/index.ts";
import { decideStatusWrite } from "./pool-status.ts";

const ready = { type: "Ready", status: "True", reason: "Ready", message: "", lastTransitionTime: "2026-12-07T00:00:00Z" } as const;
const old: ImpVMRunnerPoolStatus = { desired: 2, current: 2, idle: 2, busy: 0, starting: 0, failed: 0, queuedJobs: 0, conditions: [ready] };

test("an unchanged status is not written", () => {
  assert.deepEqual(decideStatusWrite(old, { ...old }, 1_000, 1_500, 3_000), { kind: "none" });
});

test("counts written lately wait for the interval; then, or with no write of ours before, they are written", () => {
  const busier = { ...old, idle: 1, busy: 1, queuedJobs: 3, lastScaleTime: "2026-12-07T00:00:01Z" };
  assert.deepEqual(decideStatusWrite(old, busier, 1_000, 1_500, 3_000), { kind: "later", inMs: 2_500 });
  assert.deepEqual(decideStatusWrite(old, busier, 1_000, 4_000, 3_000), { kind: "now" });
  assert.deepEqual(decideStatusWrite(old, busier, undefined, 1_500, 3_000), { kind: "now" }, "a restarted operator writes at once");
  assert.deepEqual(decideStatusWrite(old, busier, 90_000, 1_500, 3_000), { kind: "now" }, "the clock stepped back: no wait for a write 'in the future'");
});

test("anything but the counts is written at once", () => {
  const notReady = { ...old, idle: 1, conditions: [{ ...ready, status: "False" as const, reason: "NoCredentials" }] };
  assert.deepEqual(decideStatusWrite(old, notReady, 1_000, 1_001, 3_000), { kind: "now" });
  assert.deepEqual(decideStatusWrite(old, { ...old, observedGeneration: 2 }, 1_000, 1_001, 3_000), { kind: "now" });
  assert.deepEqual(decideStatusWrite(old, { ...old, failureBudget: { consecutiveFailures: 1, lastFailureTime: "x", backoffUntil: "y", countedThrough: "x", generation: 1 } }, 1_000, 1_001, 3_000), { kind: "now" });
});
