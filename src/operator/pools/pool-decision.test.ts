import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../../shared/index.ts";
import { PoolExpectations } from "./expectations.ts";
import { decidePool, DEFAULT_FAILURE_BUDGET, failureBackoffMs, failureBudgetStatus, NO_FAILURES, restoreFailures, updateFailures, type PoolObservation, type PoolVmView } from "./pool-decision.ts";

const T0 = 1_700_000_000_000;

function vm(name: string, phase: PoolVmView["phase"], extra: Partial<PoolVmView> = {}): PoolVmView {
  return { name, uid: `uid-${name}`, phase, deleting: false, busy: false, bound: phase !== undefined && phase !== "Pending", createdAt: T0, runningAt: phase === "Running" ? T0 : undefined, failedAt: undefined, ...extra };
}

function observe(extra: Partial<PoolObservation> = {}): PoolObservation {
  return {
    minIdle: 2,
    maxConcurrent: 5,
    scaleUpStep: 5,
    generation: 1,
    vms: [],
    creating: [],
    deletingExpected: [],
    queuedJobs: 0,
    failures: NO_FAILURES,
    policy: DEFAULT_FAILURE_BUDGET,
    now: T0,
    ...extra,
  };
}

describe("decidePool", () => {
  it("creates minIdle VMs for an empty pool", () => {
    const d = decidePool(observe());
    assert.equal(d.create, 2);
    assert.deepEqual(d.counts, { desired: 2, current: 0, idle: 0, busy: 0, starting: 0, failed: 0 });
  });

  it("counts the VMs that wait for node capacity (unbound, judged unschedulable), and creates no more for demand they already stand for", () => {
    const d = decidePool(observe({ minIdle: 0, queuedJobs: 3, vms: [vm("p-a", "Pending", { unschedulable: true }), vm("p-b", "Pending", { unschedulable: true }), vm("p-c", "Pending"), vm("p-d", "Pending", { unschedulable: true, deleting: true })] }));
    assert.equal(d.waitingForCapacity, 2, "p-c is not judged yet; p-d is going");
    assert.equal(d.create, 0, "three jobs, three live VMs waiting for them: none more");
    assert.equal(decidePool(observe()).waitingForCapacity, 0);
  });

  it("drains a cordoned node: its idle runners are scaled down and replaced; a busy one finishes its job; a starting one is left to start", () => {
    const d = decidePool(observe({ vms: [vm("p-idle1", "Running", { draining: true }), vm("p-idle2", "Running", { draining: true }), vm("p-busy", "Running", { draining: true, busy: true }), vm("p-boot", "Booting", { draining: true }), vm("p-else", "Running")] }));
    assert.deepEqual(d.scaleDown, ["p-idle1", "p-idle2"], "both idle runners there go, although the pool is not above its size");
    // desired = busy 1 + minIdle 2 = 3; have = busy 1 + idle elsewhere 1 + starting 1 = 3: nothing more to create yet,
    // and room (maxConcurrent 5 − 5 non-terminal) is none until the drained two are gone.
    assert.deepEqual(d.counts, { desired: 3, current: 5, idle: 1, busy: 1, starting: 1, failed: 0 });
    const after = decidePool(observe({ vms: [vm("p-busy", "Running", { draining: true, busy: true }), vm("p-else", "Running")] }));
    assert.equal(after.create, 1, "with them gone, a replacement is created (the scheduler places it off the cordoned node)");
    assert.deepEqual(after.scaleDown, []);
    assert.deepEqual(decidePool(observe({ vms: [vm("p-idle1", "Running"), vm("p-idle2", "Running")] })).scaleDown, [], "uncordoned: nothing is drained");
  });

  it("counts starting VMs and creations not yet in the cache as capacity", () => {
    assert.equal(decidePool(observe({ vms: [vm("p-aaaaa", "Booting")] })).create, 1);
    assert.equal(decidePool(observe({ vms: [vm("p-aaaaa", "Booting")], creating: ["p-bbbbb"] })).create, 0);
  });

  it("keeps minIdle idle runners beside busy ones, capped by maxConcurrent", () => {
    const busy = [1, 2, 3, 4].map((i) => vm(`p-busy${i}`, "Running", { busy: true }));
    const d = decidePool(observe({ vms: busy }));
    assert.equal(d.counts.desired, 5);
    assert.equal(d.create, 1, "only one more fits under maxConcurrent 5");
    assert.equal(d.cappedByMaxConcurrent, true);
  });

  it("never creates more than scaleUpStep at once", () => {
    assert.equal(decidePool(observe({ minIdle: 10, maxConcurrent: 20, scaleUpStep: 3 })).create, 3);
  });

  it("bursts for queued jobs up to maxConcurrent", () => {
    const d = decidePool(observe({ queuedJobs: 10, vms: [vm("p-aaaaa", "Running"), vm("p-bbbbb", "Running")] }));
    assert.equal(d.counts.desired, 5);
    assert.equal(d.create, 3);
  });

  it("terminal VMs hold no capacity and are removed; failed ones are counted", () => {
    const d = decidePool(observe({ vms: [vm("p-aaaaa", "Failed", { failedAt: T0 }), vm("p-bbbbb", "Succeeded"), vm("p-ccccc", "Running")] }));
    assert.deepEqual([...d.removeTerminal].sort(), ["p-aaaaa", "p-bbbbb"]);
    assert.equal(d.counts.failed, 1);
    assert.equal(d.counts.current, 1);
  });

  it("VMs being deleted still count against maxConcurrent but not as capacity", () => {
    const deleting = [1, 2, 3, 4].map((i) => vm(`p-del0${i}`, "Running", { deleting: true }));
    const d = decidePool(observe({ vms: deleting }));
    assert.equal(d.create, 1, "four VMs still run; one more fits under 5");
  });

  it("scales down unbound VMs and idle runners, never busy or bound starting ones", () => {
    const vms = [
      vm("p-old01", "Running", { createdAt: T0 - 2000 }),
      vm("p-new01", "Running", { createdAt: T0 - 1000 }),
      vm("p-idle3", "Running", { createdAt: T0 }),
      vm("p-busy1", "Running", { busy: true }),
      vm("p-boot1", "Booting"),
    ];
    const d = decidePool(observe({ minIdle: 1, vms }));
    // desired = busy 1 + minIdle 1 = 2; have 5 → 3 too many, but only the 3 idle ones may go.
    assert.deepEqual(d.scaleDown, ["p-old01", "p-new01", "p-idle3"]);
    assert.equal(d.create, 0);
    const d2 = decidePool(observe({ minIdle: 0, vms: [vm("p-busy1", "Running", { busy: true }), vm("p-boot1", "Booting")] }));
    assert.deepEqual(d2.scaleDown, []);
    const d3 = decidePool(observe({ minIdle: 0, vms: [vm("p-idle1", "Running"), vm("p-pend1", "Pending"), vm("p-pend2", "Pending", { createdAt: T0 + 1 })] }));
    assert.deepEqual(d3.scaleDown, ["p-pend2", "p-pend1", "p-idle1"], "unbound VMs (newest first) go before idle runners");
  });

  it("a runner that finished its job is not idle, never scaled down, still holds its slot, and is replaced at once", () => {
    // The job is done on p-done1 (completed webhook); p-next1 came up for it while it ran.
    const vms = [vm("p-done1", "Running", { createdAt: T0 - 1000, finished: true }), vm("p-next1", "Running")];
    const d = decidePool(observe({ minIdle: 1, maxConcurrent: 2, vms }));
    assert.deepEqual(d.scaleDown, [], "deleting p-done1 would race its own exit and end it Failed/Deleted");
    assert.equal(d.counts.idle, 1);
    assert.equal(d.create, 0);
    const alone = decidePool(observe({ minIdle: 1, maxConcurrent: 2, vms: [vm("p-done1", "Running", { finished: true })] }));
    assert.equal(alone.create, 1, "its replacement does not wait for it to end");
    assert.equal(alone.counts.current, 1);
    const full = decidePool(observe({ minIdle: 1, maxConcurrent: 1, vms: [vm("p-done1", "Running", { finished: true })] }));
    assert.equal(full.create, 0, "its VMM still runs: it counts against maxConcurrent until it ends");
  });
});

describe("failure budget", () => {
  it("backs off 5, 10, 20, 40, 80 s and stays at 80 s", () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 9].map((n) => failureBackoffMs(DEFAULT_FAILURE_BUDGET, n)), [5_000, 10_000, 20_000, 40_000, 80_000, 80_000, 80_000]);
    assert.equal(failureBackoffMs(DEFAULT_FAILURE_BUDGET, 0), 0);
  });

  it("counts each failed VM once, resets on a VM whose workload started, restarts on a spec change", () => {
    const f1 = updateFailures(NO_FAILURES, [vm("p-aaaaa", "Failed", { failedAt: T0 })], 1, T0);
    assert.equal(f1.consecutive, 1);
    const again = updateFailures(f1, [vm("p-aaaaa", "Failed", { failedAt: T0 })], 1, T0 + 1);
    assert.equal(again.consecutive, 1, "the same VM is not counted twice");
    const f2 = updateFailures(again, [vm("p-aaaaa", "Failed", { failedAt: T0 }), vm("p-bbbbb", "Failed", { failedAt: T0 + 5 })], 1, T0 + 10);
    assert.equal(f2.consecutive, 2);
    const ok = updateFailures(f2, [vm("p-ccccc", "Running", { runningAt: T0 + 20 })], 1, T0 + 20);
    assert.equal(ok.consecutive, 0);
    const respec = updateFailures(f2, [], 2, T0 + 30);
    assert.equal(respec.consecutive, 0);
    // A VM that failed after its runner started is not a start failure.
    const late = updateFailures(NO_FAILURES, [vm("p-ddddd", "Failed", { runningAt: T0, failedAt: T0 + 100 })], 1, T0 + 200);
    assert.equal(late.consecutive, 0);
  });

  it("holds creation during the backoff, probes one VM at a time, and reports exhaustion after 5", async () => {
    const clock = new FakeClock(T0);
    let failures = NO_FAILURES;
    const created: number[] = [];
    for (let i = 1; i <= 6; i++) {
      const failedVm = vm(`p-fail${i}`, "Failed", { failedAt: clock.now() });
      const d = decidePool(observe({ vms: [failedVm], failures, now: clock.now() }));
      failures = d.failures;
      assert.equal(d.failures.consecutive, i);
      assert.equal(d.create, 0, `held right after failure ${i}`);
      assert.equal(d.holdUntil, clock.now() + failureBackoffMs(DEFAULT_FAILURE_BUDGET, i));
      assert.equal(d.budgetExhausted, i >= 5);
      const waitMs = failureBackoffMs(DEFAULT_FAILURE_BUDGET, i);
      const justBefore = decidePool(observe({ vms: [failedVm], failures, now: clock.now() + waitMs - 1 }));
      assert.equal(justBefore.create, 0);
      const after = decidePool(observe({ vms: [failedVm], failures, now: clock.now() + waitMs }));
      assert.equal(after.create, 1, "one probe VM, not minIdle of them");
      created.push(waitMs);
      await clock.advance(waitMs);
    }
    assert.deepEqual(created, [5_000, 10_000, 20_000, 40_000, 80_000, 80_000]);
    assert.equal(clock.now() - T0, 235_000, "six failures in a row cost the pool 235 s of waiting, not a tight loop");
  });
});

describe("create expectations", () => {
  it("a stale cache that has not seen the created VMs does not make the pool create them again", () => {
    const clock = new FakeClock(T0);
    const expectations = new PoolExpectations(clock);
    const pool = "ns/p";
    const staleCache = new Map<string, { deleting: boolean }>();
    // Reconcile 1: empty pool → create 2.
    let pending = expectations.settle(pool, staleCache);
    const d1 = decidePool(observe({ creating: pending.creating }));
    assert.equal(d1.create, 2);
    for (let i = 0; i < d1.create; i++) expectations.expectCreated(pool, `p-new0${i}`);
    // Reconcile 2 and 3, before the informer delivered the ADDs: the cache is still empty.
    for (let round = 0; round < 2; round++) {
      pending = expectations.settle(pool, staleCache);
      assert.equal(decidePool(observe({ creating: pending.creating })).create, 0, "no extra VMs from a stale cache");
    }
    // The cache catches up: the expectations are settled by name, and nothing more is created.
    const caughtUp = new Map([["p-new00", { deleting: false }], ["p-new01", { deleting: false }]]);
    pending = expectations.settle(pool, caughtUp);
    assert.deepEqual(pending.creating, []);
    assert.equal(decidePool(observe({ creating: pending.creating, vms: [vm("p-new00", "Pending"), vm("p-new01", "Pending")] })).create, 0);
  });

  it("an expectation whose VM never shows up expires after the TTL", async () => {
    const clock = new FakeClock(T0);
    const expectations = new PoolExpectations(clock, 60_000);
    expectations.expectCreated("ns/p", "p-lost1");
    assert.deepEqual(expectations.settle("ns/p", new Map()).creating, ["p-lost1"]);
    await clock.advance(60_000);
    assert.deepEqual(expectations.settle("ns/p", new Map()).creating, []);
  });

  it("a deleted VM still in the cache does not count as capacity until the cache shows it going", () => {
    const clock = new FakeClock(T0);
    const expectations = new PoolExpectations(clock);
    expectations.expectDeleted("ns/p", "p-aaaaa");
    const cache = new Map([["p-aaaaa", { deleting: false }]]);
    const pending = expectations.settle("ns/p", cache);
    const d = decidePool(observe({ minIdle: 1, vms: [vm("p-aaaaa", "Running")], deletingExpected: pending.deleting }));
    assert.equal(d.create, 1, "the deleted VM is not an idle runner any more");
    assert.deepEqual(d.scaleDown, []);
    assert.deepEqual(expectations.settle("ns/p", new Map([["p-aaaaa", { deleting: true }]])).deleting, []);
  });
});

describe("the failure budget across an operator restart", () => {
  it("is written to status while failing, and a fresh operator restores it: same count, same hold, nothing counted twice", async () => {
    const clock = new FakeClock(T0);
    const failedVms: PoolVmView[] = [];
    let failures = NO_FAILURES;
    for (let i = 1; i <= 3; i++) {
      await clock.advance(1_000);
      failedVms.push(vm(`p-fail${i}`, "Failed", { failedAt: clock.now() }));
      failures = decidePool(observe({ vms: failedVms, failures, now: clock.now() })).failures;
    }
    assert.equal(failures.consecutive, 3);
    const status = failureBudgetStatus(failures, DEFAULT_FAILURE_BUDGET);
    assert.deepEqual(status, {
      consecutiveFailures: 3,
      lastFailureTime: new Date(T0 + 3_000).toISOString(),
      backoffUntil: new Date(T0 + 3_000 + 20_000).toISOString(),
      countedThrough: new Date(T0 + 3_000).toISOString(),
      generation: 1,
    });
    // The status goes through JSON (the API server) before a new operator reads it.
    const restored = restoreFailures(JSON.parse(JSON.stringify(status)) as typeof status, 1);
    await clock.advance(5_000);
    const afterRestart = decidePool(observe({ vms: failedVms, failures: restored, now: clock.now() }));
    assert.equal(afterRestart.failures.consecutive, 3, "the failed VMs still present are not counted again");
    assert.equal(afterRestart.create, 0);
    assert.equal(afterRestart.holdUntil, T0 + 23_000, "the restarted operator holds until the same time");
    assert.equal(afterRestart.budgetExhausted, false);
    const probe = decidePool(observe({ vms: failedVms, failures: afterRestart.failures, now: T0 + 23_000 }));
    assert.equal(probe.create, 1, "then one VM probes, as before the restart");
    // A failure after the restart counts on top.
    const fourth = vm("p-fail4", "Failed", { failedAt: T0 + 30_000 });
    const later = decidePool(observe({ vms: [...failedVms, fourth], failures: probe.failures, now: T0 + 30_000 }));
    assert.equal(later.failures.consecutive, 4);
    assert.equal(later.holdUntil, T0 + 30_000 + 40_000);
  });

  it("a VM that starts clears the record; a record of an older generation or unreadable is a fresh budget", () => {
    const restored = restoreFailures({ consecutiveFailures: 2, lastFailureTime: new Date(T0).toISOString(), countedThrough: new Date(T0).toISOString(), generation: 1 }, 1);
    const started = decidePool(observe({ vms: [vm("p-ok", "Running", { runningAt: T0 + 1 })], failures: restored, now: T0 + 2 }));
    assert.equal(started.failures.consecutive, 0);
    assert.equal(failureBudgetStatus(started.failures, DEFAULT_FAILURE_BUDGET), undefined, "nothing left to keep");
    assert.equal(restoreFailures({ consecutiveFailures: 2, lastFailureTime: new Date(T0).toISOString(), countedThrough: new Date(T0).toISOString(), generation: 1 }, 2).consecutive, 0, "a spec change starts afresh");
    assert.equal(restoreFailures({ consecutiveFailures: 2, lastFailureTime: "yesterday", countedThrough: "", generation: 1 }, 1).consecutive, 0);
    assert.equal(restoreFailures(undefined, 1).consecutive, 0);
  });
});
