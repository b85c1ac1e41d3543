import assert from "node:assert/strict";
import { test } from "node:test";
import type { ImpVM, ImpVMStatus } from "../../api/index.ts";
import type { Cached } from "../../kube/index.ts";
import type { HeldClone } from "../cache/index.ts";
import { decideHeldClone, generationIdOf, MAX_PROMOTION_ATTEMPTS } from "./cache-settler.ts";

const HOLD = 60_000;
const held: HeldClone = { uid: "5d0c9b1e-aaaa-bbbb-cccc-000000000001", ref: { namespace: "ci", volume: "pool-uid", sizeBytes: 64 * 1024 ** 2 }, generation: "/state/caches/ci/pool-uid/67108864/gen-0000000000000-empty.raw", heldAtMs: 1_000_000 };
const vm = (status: ImpVMStatus): Cached<ImpVM> => ({ apiVersion: "imp.dev/v1alpha1", kind: "ImpVM", metadata: { name: "r-1", namespace: "ci", uid: held.uid }, spec: { templateRef: { name: "t" }, lifecycle: "ephemeral" }, status }) as Cached<ImpVM>;
const completed = "2026-12-07T17:20:00Z";
const promote = { decision: "Promote" as const, reason: "Trusted", jobCompletedAt: completed };

test("a held clone is promoted only on the operator's Promote for a VM that succeeded, as a generation ordered by its job's completion", () => {
  assert.deepEqual(decideHeldClone(held, vm({ phase: "Succeeded", cache: { promotion: promote } }), held.heldAtMs + 1, HOLD, 0), { type: "Promote", generationId: generationIdOf(Date.parse(completed), held.uid) });
  assert.match(generationIdOf(Date.parse(completed), held.uid), /^1796664000000-5d0c9b1eaaaa$/);
  assert.ok(generationIdOf(1, "b") < generationIdOf(10, "a"), "ids sort by completion time first");
});

test("everything else discards, and only time without a decision waits (bounded)", () => {
  const at = held.heldAtMs + 1;
  const cases: Array<[string, Cached<ImpVM> | undefined, number, number, string]> = [
    ["the VM is gone", undefined, at, 0, "VmGone"],
    ["the operator said Discard", vm({ phase: "Succeeded", cache: { promotion: { decision: "Discard", reason: "UntrustedEvent" } } }), at, 0, "UntrustedEvent"],
    ["Promote for a VM that failed", vm({ phase: "Failed", cache: { promotion: promote } }), at, 0, "VmNotSucceeded"],
    ["Promote without a completion time", vm({ phase: "Succeeded", cache: { promotion: { decision: "Promote", reason: "Trusted" } } }), at, 0, "NoCompletionTime"],
    ["promotion failed too often", vm({ phase: "Succeeded", cache: { promotion: promote } }), at, MAX_PROMOTION_ATTEMPTS, "PromotionFailed"],
    ["no decision within the hold", vm({ phase: "Succeeded" }), held.heldAtMs + HOLD + 1, 0, "NoDecision"],
  ];
  for (const [name, v, now, failures, reason] of cases) assert.deepEqual(decideHeldClone(held, v, now, HOLD, failures), { type: "Discard", reason }, name);
  assert.deepEqual(decideHeldClone(held, vm({ phase: "Succeeded" }), held.heldAtMs + HOLD, HOLD, 0), { type: "Wait" });
  assert.deepEqual(decideHeldClone(held, vm({ phase: "Running" }), at, HOLD, 0), { type: "Wait" });
});
