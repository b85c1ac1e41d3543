import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../../shared/index.ts";
import { MAX_RECENT_REPOSITORIES, RECENT_REPOSITORY_TTL_MS, RunnerActivity, SETTLED_JOB_TTL_MS } from "./runner-activity.ts";

describe("RunnerActivity demand", () => {
  it("a listing adds what waits and drops what it no longer lists, but not demand newer than the listing", async () => {
    const clock = new FakeClock();
    const a = new RunnerActivity(clock);
    a.jobQueued("ns/p", 1, "acme/web");
    a.jobQueued("ns/p", 2, "acme/api");
    const startedAt = clock.now();
    await clock.advance(1_000);
    a.jobQueued("ns/p", 3, "acme/web"); // its delivery arrived while the listing ran
    a.jobsListed("ns/p", ["acme/web"], [], startedAt);
    assert.equal(a.isQueued("ns/p", 1), false, "listed nowhere although its repository was covered: taken or cancelled");
    assert.equal(a.isQueued("ns/p", 2), true, "its repository was not covered by this listing");
    assert.equal(a.isQueued("ns/p", 3), true, "newer than the listing");
  });

  it("a listing of the whole scope (Gitea) drops every job it no longer lists, in any repository, but not newer demand", async () => {
    const clock = new FakeClock();
    const a = new RunnerActivity(clock);
    a.jobQueued("ns/p", 1, "acme/web");
    a.jobQueued("ns/p", 2, "acme/api");
    a.jobQueued("ns/p", 4, "acme/api");
    const startedAt = clock.now();
    await clock.advance(1_000);
    a.jobQueued("ns/p", 3, "acme/web");
    a.jobsListed("ns/p", "whole-scope", [4], startedAt);
    assert.deepEqual([1, 2, 3, 4].map((id) => a.isQueued("ns/p", id)), [false, false, true, true], "1 and 2 were taken; 3 came after the listing started; 4 still waits");
    assert.equal(a.queuedJobs("ns/p"), 2);
  });

  it("a job seen taken never counts as queued again, for a day", async () => {
    const clock = new FakeClock();
    const a = new RunnerActivity(clock);
    a.jobQueued("ns/p", 5, "acme/web");
    a.jobTaken(5);
    assert.equal(a.jobQueued("ns/p", 5, "acme/web"), false);
    assert.equal(a.queuedJobs("ns/p"), 0);
    await clock.advance(SETTLED_JOB_TTL_MS);
    assert.equal(a.jobQueued("ns/p", 5, "acme/web"), true, "forgotten after a day (the forge's own state decides then)");
  });

  it("a pool's own secret settles a job for that pool only", () => {
    const a = new RunnerActivity(new FakeClock());
    a.jobQueued("ns/b", 6, "acme/web");
    a.jobTaken(6, new Set(["ns/a"]));
    assert.equal(a.isSettled(6, "ns/a"), true);
    assert.equal(a.isSettled(6, "ns/b"), false);
    assert.equal(a.isQueued("ns/b", 6), true);
    assert.equal(a.jobQueued("ns/a", 6, "acme/web"), false, "a replay to pool a");
    a.jobTaken(6);
    assert.equal(a.isSettled(6, "ns/b"), true, "the App's secret speaks for every pool");
  });

  it("a re-run under the same job id (a forge that keeps the id) is new demand; the attempt that ended, replayed, is not", () => {
    const a = new RunnerActivity(new FakeClock());
    assert.equal(a.jobQueued("ns/p", 7, "acme/web", 1), true);
    a.jobTaken(7, "all", 1);
    assert.equal(a.queuedJobs("ns/p"), 0);
    assert.equal(a.jobQueued("ns/p", 7, "acme/web", 1), false, "attempt 1 replayed: settled");
    assert.equal(a.isSettled(7, "ns/p", 2), false);
    assert.equal(a.jobQueued("ns/p", 7, "acme/web", 2), true, "attempt 2, the re-run, waits");
    assert.equal(a.queuedJobs("ns/p"), 1);
    a.jobTaken(7, new Set(["ns/p"]), 2);
    assert.equal(a.isSettled(7, "ns/p", 2), true);
    assert.equal(a.isSettled(7, "ns/q", 2), false, "attempt 2 settled by ns/p's own secret only: the earlier 'all' does not carry over");
    assert.equal(a.isSettled(7, "ns/q", 1), false, "a later attempt starts over for every pool");
  });

  it("a late word about an earlier attempt neither ends a re-run's demand nor widens what its settle covers", () => {
    const a = new RunnerActivity(new FakeClock());
    a.jobTaken(7, "all", 1);
    assert.equal(a.jobQueued("ns/p", 7, "acme/web", 2), true);
    assert.deepEqual(a.jobTaken(7, "all", 1), [], "attempt 1's completed, redelivered late");
    assert.equal(a.queuedJobs("ns/p"), 1, "attempt 2 still waits");
    a.jobTaken(7, new Set(["ns/p"]), 2);
    a.jobTaken(7, "all", 1);
    assert.equal(a.isSettled(7, "ns/q", 2), false, "attempt 1's trust for all does not leak into attempt 2's settle");
  });

  it("remembers at most the most recent repositories a pool heard of, for a day", async () => {
    const clock = new FakeClock();
    const a = new RunnerActivity(clock);
    for (let i = 0; i < MAX_RECENT_REPOSITORIES + 5; i++) a.repositoryHeard("ns/p", `acme/r${i}`);
    const recent = a.recentRepositories("ns/p");
    assert.equal(recent.length, MAX_RECENT_REPOSITORIES);
    assert.equal(recent.at(-1), `acme/r${MAX_RECENT_REPOSITORIES + 4}`);
    await clock.advance(RECENT_REPOSITORY_TTL_MS + 1);
    assert.deepEqual(a.recentRepositories("ns/p"), []);
  });
});
