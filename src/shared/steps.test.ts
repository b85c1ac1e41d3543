import { test } from "node:test";
import assert from "node:assert/strict";
import { runSteps, type Step } from "./steps.ts";

test("a failing step rolls back what earlier steps acquired, in reverse order, and rethrows its own error", async () => {
  const events: string[] = [];
  const boom = new Error("no tap");
  const steps: Step<string[]>[] = [
    { name: "disk", run: (log, ctx) => { log.push("disk"); ctx.onCleanup("rm disk", () => { log.push("undo disk"); }); } },
    { name: "socket", run: (log, ctx) => { log.push("socket"); ctx.onCleanup("rm socket", async () => { log.push("undo socket"); }); } },
    { name: "tap", run: () => { throw boom; } },
    { name: "never", run: (log) => { log.push("never"); } },
  ];
  let failedStep = "";
  await assert.rejects(runSteps(steps, events, { onFailure: (step) => { failedStep = step; } }), (err) => err === boom);
  assert.deepEqual(events, ["disk", "socket", "undo socket", "undo disk"]);
  assert.equal(failedStep, "tap");
});

test("a successful run returns timings and a rollback that runs each cleanup once even if one fails", async () => {
  const events: string[] = [];
  const steps: Step<string[]>[] = [
    { name: "a", run: (log, ctx) => { ctx.onCleanup("undo a", () => { log.push("undo a"); }); } },
    { name: "b", run: (_log, ctx) => { ctx.onCleanup("undo b", () => { throw new Error("busy"); }); } },
  ];
  let t = 0;
  const run = await runSteps(steps, events, { now: () => (t += 5) });
  assert.deepEqual(run.timings, [{ step: "a", ms: 5 }, { step: "b", ms: 5 }]);
  await run.rollback();
  await run.rollback();
  assert.deepEqual(events, ["undo a"]);
});

test("an aborted run stops before the next step and rolls back", async () => {
  const events: string[] = [];
  const abort = new AbortController();
  const steps: Step<string[]>[] = [
    { name: "a", run: (log, ctx) => { ctx.onCleanup("undo a", () => { log.push("undo a"); }); abort.abort(new Error("deleted")); } },
    { name: "b", run: (log) => { log.push("b"); } },
  ];
  await assert.rejects(runSteps(steps, events, { signal: abort.signal }), /deleted/);
  assert.deepEqual(events, ["undo a"]);
});
