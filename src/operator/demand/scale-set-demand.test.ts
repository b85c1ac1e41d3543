import assert from "node:assert/strict";
import { test } from "node:test";
import { jobsWaitingForCapacity, type ScaleSetPoolView } from "./scale-set-demand.ts";

const view = (capacity: number | undefined, available: number, assigned = 2): ScaleSetPoolView => ({
  reason: "Listening",
  message: "",
  scaleSetId: 1,
  sessionId: "s",
  statistics: { totalAssignedJobs: assigned, totalRunningJobs: 1, totalAvailableJobs: available },
  capacity,
});

test("jobs a scale-set pool leaves on GitHub count as waiting for capacity only beyond what it said, and while it said less than its maxConcurrent", () => {
  assert.equal(jobsWaitingForCapacity(view(2, 6), 10), 6, "the cluster holds 2 of 10, both assigned: the 6 waiting wait for nodes");
  assert.equal(jobsWaitingForCapacity(view(4, 6), 10), 4, "room for 2 more: 2 of the 6 only wait to be offered");
  assert.equal(jobsWaitingForCapacity(view(4, 1, 0), 10), 0, "one job, room for four: nothing waits for nodes");
  assert.equal(jobsWaitingForCapacity(view(10, 6), 10), 0, "at maxConcurrent they wait for the pool's own cap, not for nodes");
  assert.equal(jobsWaitingForCapacity(view(0, 0), 10), 0, "nothing waiting");
  assert.equal(jobsWaitingForCapacity(view(undefined, 6), 10), 0, "before the first poll nothing was said");
  assert.equal(jobsWaitingForCapacity(undefined, 10), 0, "no listener yet");
});
