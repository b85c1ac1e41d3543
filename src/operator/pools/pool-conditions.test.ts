import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ConditionInput } from "./conditions.ts";
import { poolConditions, type PoolConditionFacts } from "./pool-conditions.ts";

const failures = { consecutive: 0, lastFailureAt: undefined, counted: new Set<string>(), generation: 1, countedThrough: undefined, restoredThrough: undefined };

function facts(over: Partial<Omit<PoolConditionFacts, "decision">> & { decision?: Partial<PoolConditionFacts["decision"]> } = {}): PoolConditionFacts {
  const { decision, ...rest } = over;
  return {
    forge: { ok: true, message: "2 runner(s) listed" },
    listener: undefined,
    maxConcurrent: 4,
    capMs: 300_000,
    ...rest,
    decision: { budgetExhausted: false, cappedByMaxConcurrent: false, holdUntil: undefined, failures, ...decision },
  };
}

function byType(set: readonly ConditionInput[]): Record<string, ConditionInput> {
  return Object.fromEntries(set.map((c) => [c.type, c]));
}

describe("poolConditions", () => {
  const table: { name: string; facts: PoolConditionFacts; want: Record<string, [status: string, reason: string]>; remove: string[] }[] = [
    {
      name: "a healthy webhook pool",
      facts: facts(),
      want: { CredentialsValid: ["True", "RunnersListed"], Ready: ["True", "Reconciled"], ScalingLimited: ["False", "WithinLimits"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "VMs wait for node capacity: scaling limited by the nodes, after the failure backoff and maxConcurrent",
      facts: facts({ decision: { waitingForCapacity: 3 } }),
      want: { Ready: ["True", "Reconciled"], ScalingLimited: ["True", "NodeCapacity"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "a scale-set pool leaves jobs on GitHub for want of nodes: scaling limited by the nodes",
      facts: facts({ listener: { reason: "Listening", message: "" }, jobsWaitingForCapacity: 6 }),
      want: { Ready: ["True", "Reconciled"], ScalingLimited: ["True", "NodeCapacity"], ScaleSetListening: ["True", "Listening"] },
      remove: [],
    },
    {
      name: "maxConcurrent says more than node capacity",
      facts: facts({ decision: { waitingForCapacity: 3, cappedByMaxConcurrent: true } }),
      want: { ScalingLimited: ["True", "MaxConcurrent"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "the forge refused the listing",
      facts: facts({ forge: { ok: false, message: "401 Bad credentials" } }),
      want: { CredentialsValid: ["False", "ForgeError"], Ready: ["False", "ForgeError"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "no listing yet: no credentials verdict, still ready",
      facts: facts({ forge: undefined }),
      want: { Ready: ["True", "Reconciled"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "failure budget exhausted wins over a forge error",
      facts: facts({ forge: { ok: false, message: "x" }, decision: { budgetExhausted: true, failures: { ...failures, consecutive: 5 } } }),
      want: { Ready: ["False", "FailureBudgetExhausted"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "creation held back after start failures",
      facts: facts({ decision: { holdUntil: 1_000, cappedByMaxConcurrent: true, failures: { ...failures, consecutive: 2 } } }),
      want: { Ready: ["True", "Reconciled"], ScalingLimited: ["True", "StartFailureBackoff"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "demand above maxConcurrent",
      facts: facts({ decision: { cappedByMaxConcurrent: true } }),
      want: { ScalingLimited: ["True", "MaxConcurrent"] },
      remove: ["ScaleSetListening"],
    },
    {
      name: "scale-set pool whose listener has not reported yet",
      facts: facts({ listener: "none-yet" }),
      want: { Ready: ["True", "Reconciled"], ScaleSetListening: ["False", "Starting"] },
      remove: [],
    },
    {
      name: "scale-set pool listening",
      facts: facts({ listener: { reason: "Listening", message: "session open" } }),
      want: { Ready: ["True", "Reconciled"], ScaleSetListening: ["True", "Listening"] },
      remove: [],
    },
    {
      name: "scale-set pool whose listener cannot listen is not ready",
      facts: facts({ listener: { reason: "SessionConflict", message: "another session holds the scale set" } }),
      want: { Ready: ["False", "ScaleSetNotListening"], ScaleSetListening: ["False", "SessionConflict"] },
      remove: [],
    },
  ];
  for (const row of table) {
    it(row.name, () => {
      const got = poolConditions(row.facts);
      const types = byType(got.set);
      for (const [type, [status, reason]] of Object.entries(row.want)) {
        assert.equal(types[type]?.status, status, `${type} status`);
        assert.equal(types[type]?.reason, reason, `${type} reason`);
      }
      assert.deepEqual(got.remove, row.remove);
      if (row.facts.forge === undefined) assert.equal(types.CredentialsValid, undefined, "no credentials verdict before a listing");
    });
  }

  it("says what to do in its messages", () => {
    const exhausted = byType(poolConditions(facts({ decision: { budgetExhausted: true, failures: { ...failures, consecutive: 5 } } })).set);
    assert.match(exhausted.Ready?.message ?? "", /5 VMs in a row failed .* one VM every 300 s/);
    const deaf = byType(poolConditions(facts({ listener: { reason: "ScaleSetGone", message: "the scale set was deleted on GitHub; recreating it" } })).set);
    assert.equal(deaf.Ready?.message, "the scale set was deleted on GitHub; recreating it");
    const capped = byType(poolConditions(facts({ decision: { cappedByMaxConcurrent: true } })).set);
    assert.match(capped.ScalingLimited?.message ?? "", /maxConcurrent 4/);
    const both = byType(poolConditions(facts({ jobsWaitingForCapacity: 6, decision: { waitingForCapacity: 1 } })).set);
    assert.match(both.ScalingLimited?.message ?? "", /^6 job\(s\) wait on GitHub, not acquired: .*status\.scaleSet\.capacity.*; 1 runner VM\(s\) wait for node capacity/);
  });
});
