import { test } from "node:test";
import assert from "node:assert/strict";
import { ANNOTATIONS } from "../../api/index.ts";
import { decideDecommission, decommissionRequestOf } from "./decide-decommission.ts";

const started = Date.parse("2026-12-05T10:00:00.400Z");

test("an ImpNode's annotations carry a decommission request only with a readable time", () => {
  assert.equal(decommissionRequestOf(undefined), undefined);
  assert.equal(decommissionRequestOf({ other: "x" }), undefined);
  assert.equal(decommissionRequestOf({ [ANNOTATIONS.decommission]: "soon" }), undefined);
  assert.deepEqual(decommissionRequestOf({ [ANNOTATIONS.decommission]: "2026-12-05T11:00:00Z" }), { requestedAtMs: Date.parse("2026-12-05T11:00:00Z"), keepState: false });
  assert.deepEqual(decommissionRequestOf({ [ANNOTATIONS.decommission]: "2026-12-05T11:00:00Z", [ANNOTATIONS.decommissionKeepState]: "true" }), { requestedAtMs: Date.parse("2026-12-05T11:00:00Z"), keepState: true });
  assert.equal(decommissionRequestOf({ [ANNOTATIONS.decommission]: "2026-12-05T11:00:00Z", [ANNOTATIONS.decommissionKeepState]: "yes" })?.keepState, false, "only \"true\" keeps the state");
});

test("an agent retires once no VM is left, wipes its state unless told to keep it, and ignores a request older than itself", () => {
  const at = (iso: string, keepState = false) => ({ requestedAtMs: Date.parse(iso), keepState });
  const cases: Array<[string, Parameters<typeof decideDecommission>[0], ReturnType<typeof decideDecommission>["kind"], boolean | undefined]> = [
    ["no VM left: retire and wipe", { request: at("2026-12-05T11:00:00Z"), agentStartedAtMs: started, vmsOnNode: 0 }, "retire", true],
    ["keep-state: retire, keep", { request: at("2026-12-05T11:00:00Z", true), agentStartedAtMs: started, vmsOnNode: 0 }, "retire", false],
    ["VMs still on the node: wait", { request: at("2026-12-05T11:00:00Z"), agentStartedAtMs: started, vmsOnNode: 2 }, "wait", undefined],
    ["asked in the agent's first second (whole-second stamp)", { request: at("2026-12-05T10:00:00Z"), agentStartedAtMs: started, vmsOnNode: 0 }, "retire", true],
    ["asked before the agent started: a leftover", { request: at("2026-12-05T09:59:59Z"), agentStartedAtMs: started, vmsOnNode: 0 }, "ignore", undefined],
  ];
  for (const [what, input, kind, wipeState] of cases) {
    const decision = decideDecommission(input);
    assert.equal(decision.kind, kind, what);
    if (decision.kind === "retire") assert.equal(decision.wipeState, wipeState, what);
    if (decision.kind === "wait") assert.equal(decision.vms, 2, what);
  }
});
