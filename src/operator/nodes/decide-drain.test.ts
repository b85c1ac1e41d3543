import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../../shared/index.ts";
import { decideDrain, type DrainInput, type DrainVm } from "./decide-drain.ts";

const T0 = 1_700_000_000_000;
const vm = (name: string, graceMs: number, live = true): DrainVm => ({ namespace: "ci", name, uid: `uid-${name}`, live, graceMs });
const input = (over: Partial<DrainInput>, clock: FakeClock): DrainInput => ({ cordoned: true, startedAtMs: undefined, drainedAtMs: undefined, vms: [], nowMs: clock.now(), ...over });

describe("decideDrain", () => {
  it("a cordon starts the drain; each running job keeps its VM until its pool's grace from the start, then the VM is ended; the node is drained when none is left", async () => {
    const clock = new FakeClock(T0);
    const vms = [vm("short", 60_000), vm("long", 600_000)];
    const first = decideDrain(input({ vms }, clock));
    assert.deepEqual(first.actions, [{ type: "MarkStarted", atMs: T0 }]);
    assert.equal(first.recheckInMs, 60_000, "look again when the first grace runs out");

    await clock.advance(59_999);
    assert.deepEqual(decideDrain(input({ vms, startedAtMs: T0 }, clock)).actions, [], "a millisecond before the grace, nothing ends");
    await clock.advance(1);
    const due = decideDrain(input({ vms, startedAtMs: T0 }, clock));
    assert.deepEqual(due.actions.map((a) => (a.type === "EndVm" ? `${a.type} ${a.vm.name}: ${a.message}` : a.type)), ["EndVm short: its node was drained and its job ran past the pool's drain grace (1 min)"]);
    assert.equal(due.recheckInMs, 540_000);

    // The long job finished on its own; the short one was ended: nothing live, drained once.
    const done = decideDrain(input({ vms: [vm("short", 60_000, false), vm("long", 600_000, false)], startedAtMs: T0 }, clock));
    assert.deepEqual(done.actions, [{ type: "MarkDrained", atMs: T0 + 60_000 }]);
    assert.deepEqual(decideDrain(input({ vms: [], startedAtMs: T0, drainedAtMs: T0 + 60_000 }, clock)).actions, [], "marked once");
  });

  it("a node cordoned with nothing on it is drained at once; an uncordon clears both marks, and a node never cordoned is left alone", () => {
    const clock = new FakeClock(T0);
    assert.deepEqual(decideDrain(input({}, clock)).actions, [{ type: "MarkStarted", atMs: T0 }, { type: "MarkDrained", atMs: T0 }]);
    assert.deepEqual(decideDrain(input({ cordoned: false, startedAtMs: T0, drainedAtMs: T0 }, clock)).actions, [{ type: "ClearMarks" }]);
    assert.deepEqual(decideDrain(input({ cordoned: false, vms: [vm("a", 0)] }, clock)).actions, [], "not cordoned: a zero grace ends nothing");
  });

  it("a new leader takes the grace up from the recorded start, not from when it first looked", () => {
    const clock = new FakeClock(T0 + 3_600_000);
    const d = decideDrain(input({ vms: [vm("job", 3_600_000)], startedAtMs: T0 }, clock));
    assert.deepEqual(d.actions.map((a) => a.type), ["EndVm"]);
  });
});
