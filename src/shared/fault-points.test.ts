import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { FAULT_POINTS_ENV, FaultPoints, NO_FAULTS, parseFaultPlan } from "./fault-points.ts";
import { ImpError } from "./errors.ts";

test("parses a plan and refuses a malformed rule", () => {
  assert.deepEqual(parseFaultPlan("agent.boot.disks=hang, operator.setup.afterMint=crash@2,x=delay:50"), [
    { point: "agent.boot.disks", action: { kind: "hang" } },
    { point: "operator.setup.afterMint", action: { kind: "crash" }, onHit: 2 },
    { point: "x", action: { kind: "delay", ms: 50 } },
  ]);
  assert.throws(() => parseFaultPlan("agent.boot=explode"), (e: unknown) => e instanceof ImpError && e.code === "FaultPlanInvalid");
});

test("an unarmed set passes every point and counts hits", async () => {
  await NO_FAULTS.hit("anything");
  const faults = new FaultPoints();
  await faults.hit("p");
  await faults.hit("p");
  assert.equal(faults.hits("p"), 2);
  assert.equal(faults.armed, false);
});

test("fail acts only on the chosen hit; hang waits for the caller's abort", async () => {
  const fired: string[] = [];
  const faults = new FaultPoints(parseFaultPlan("p=fail@2,h=hang"), (point) => fired.push(point));
  await faults.hit("p");
  await assert.rejects(faults.hit("p"), (e: unknown) => e instanceof ImpError && e.code === "FaultInjected" && e.errorClass === "retryable");
  await faults.hit("p");
  const abort = new AbortController();
  const hung = faults.hit("h", abort.signal);
  let settled = false;
  void hung.catch(() => (settled = true));
  // A hang ending by itself has no event to wait for: give it a while, then check it did not.
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(settled, false, "a hang must not end by itself");
  abort.abort(new Error("step timeout"));
  await assert.rejects(hung, /step timeout/);
  assert.deepEqual(fired, ["p", "h"]);
});

test("crash SIGKILLs the process at the point, armed from the environment", () => {
  const script = `import { FaultPoints } from ${JSON.stringify(new URL("./fault-points.ts", import.meta.url).href)};
const f = FaultPoints.fromEnv(process.env);
process.stdout.write("before\\n");
await f.hit("here");
process.stdout.write("after\\n");`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { env: { ...process.env, [FAULT_POINTS_ENV]: "here=crash" }, encoding: "utf8", timeout: 30_000 });
  assert.equal(child.signal, "SIGKILL");
  assert.equal(child.stdout, "before\n");
});
