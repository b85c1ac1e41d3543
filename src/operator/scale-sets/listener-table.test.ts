import { test } from "node:test";
import assert from "node:assert/strict";
import { ImpError, type ImpErrorCode } from "../../shared/index.ts";
import { ScaleSetErrorCode } from "../../forge/index.ts";
import { decideListener, DEFAULT_LISTENER_TIMINGS, LISTENER_OUTCOMES, LISTENER_PHASES, LISTENER_TABLE, START, type ListenerStep } from "./listener-table.ts";
import { outcomeOf } from "./scale-set-listener.ts";

const T = { conflictRetryMs: 7_000, backoff: { baseMs: 1_000, factor: 2, capMs: 8_000, jitter: 0, maxAttempts: Infinity } };
const at = (phase: ListenerStep["phase"], reason: ListenerStep["reason"] = "Listening", failures = 0): ListenerStep => ({ phase, reason, failures });

test("the happy path: resolve, open, then poll for ever without waiting", () => {
  let step = START;
  for (const expected of ["Opening", "Polling", "Polling", "Polling"] as const) {
    const d = decideListener(step, "ok", T);
    assert.equal(d.next.phase, expected);
    assert.equal(d.waitMs, 0);
    step = d.next;
  }
  assert.equal(step.reason, "Listening");
});

test("a 409 on opening waits conflictRetryMs and tries again, warning once, not on every retry", () => {
  const first = decideListener(at("Opening", "Starting"), "conflict", T);
  assert.deepEqual([first.next.phase, first.waitMs, first.next.reason, first.warn], ["Opening", 7_000, "SessionConflict", true]);
  const again = decideListener(first.next, "conflict", T);
  assert.deepEqual([again.next.phase, again.waitMs, again.warn], ["Opening", 7_000, false]);
  const through = decideListener(again.next, "ok", T);
  assert.deepEqual([through.next.phase, through.next.reason, through.next.failures], ["Polling", "Listening", 0]);
});

test("a queue token that expires mid-poll is refreshed; a refresh that 404s opens a new session; a deleted scale set is resolved again", () => {
  assert.equal(decideListener(at("Polling"), "tokenExpired", T).next.phase, "Refreshing");
  const lost = decideListener(at("Refreshing"), "sessionGone", T);
  assert.deepEqual([lost.next.phase, lost.next.reason, lost.warn, lost.waitMs], ["Opening", "SessionLost", true, 0]);
  const gone = decideListener(at("Polling"), "scaleSetGone", T);
  assert.deepEqual([gone.next.phase, gone.next.reason, gone.warn], ["Resolving", "ScaleSetDeleted", true]);
  assert.equal(decideListener(at("Opening"), "scaleSetGone", T).next.phase, "Resolving");
});

test("an unavailable service backs off exponentially up to the cap, in the same phase, and resets after a success", () => {
  let step = at("Polling");
  const waits: number[] = [];
  for (let i = 0; i < 6; i++) {
    const d = decideListener(step, "unavailable", T);
    assert.equal(d.next.phase, "Polling", "the session is kept: only the poll is retried");
    assert.equal(d.next.reason, "ActionsServiceUnavailable");
    waits.push(d.waitMs);
    step = d.next;
  }
  assert.deepEqual(waits, [1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
  const back = decideListener(step, "ok", T);
  assert.deepEqual([back.next.failures, back.next.reason, back.waitMs], [0, "Listening", 0]);
});

test("every phase has a transition for every outcome it can meet, and failures never end the listener", () => {
  for (const phase of LISTENER_PHASES) {
    for (const outcome of LISTENER_OUTCOMES) {
      const d = decideListener(at(phase), outcome, DEFAULT_LISTENER_TIMINGS, () => 0);
      assert.ok(LISTENER_PHASES.includes(d.next.phase), `${phase} × ${outcome}`);
      if (outcome !== "ok" && LISTENER_TABLE[phase][outcome] === undefined) assert.ok(d.waitMs > 0, `${phase} × ${outcome}: an unexpected outcome is retried after a backoff, never in a tight loop`);
    }
  }
});

test("errors map to outcomes by their code; anything unknown is a failure to back off from", () => {
  const e = (code: ImpErrorCode): ImpError => new ImpError("retryable", code, "x");
  assert.equal(outcomeOf(e(ScaleSetErrorCode.SessionConflict)), "conflict");
  assert.equal(outcomeOf(e(ScaleSetErrorCode.ScaleSetNotFound)), "scaleSetGone");
  assert.equal(outcomeOf(e(ScaleSetErrorCode.SessionNotFound)), "sessionGone");
  assert.equal(outcomeOf(e(ScaleSetErrorCode.QueueTokenExpired)), "tokenExpired");
  assert.equal(outcomeOf(e(ScaleSetErrorCode.Unavailable)), "unavailable");
  assert.equal(outcomeOf(e("GitHubUnavailable")), "unavailable");
  assert.equal(outcomeOf(e("GitHubUnauthorized")), "unauthorized");
  assert.equal(outcomeOf(new Error("boom")), "failed");
});
