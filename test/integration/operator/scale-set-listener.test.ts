/**
 * A pool's scale-set listener (src/operator/scale-sets) with Imp's scale-set client against the
 * GitHub test server, whose scale-set API test/github/scale-set-conformance.test.ts holds to the
 * real actions/scaleset module. Each test breaks one thing the way users of
 * actions-runner-controller met it and checks the listener comes back by itself, saying why on
 * the way (the condition reasons and Warning Events a person sees).
 */
import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import { ScaleSetClient, type JobMessage, type ScaleSetStatistics } from "../../../src/forge/index.ts";
import { ScaleSetListener, type ListenerSpec, type ListenerState } from "../../../src/operator/index.ts";
import { createLogger, FaultPoints, waitFor } from "../../../src/shared/index.ts";
import { startGitHub, type GitHubFixture } from "../../github/harness.ts";

const REPO = { owner: "acme", repo: "web" };
const TIMINGS = { conflictRetryMs: 300, backoff: { baseMs: 100, factor: 2, capMs: 1_000, jitter: 0, maxAttempts: Infinity } };
const WAIT = { timeoutMs: 30_000, intervalMs: 25 };

interface Recorded {
  readonly states: ListenerState[];
  readonly stats: ScaleSetStatistics[];
  readonly jobs: JobMessage[];
  readonly events: Array<{ type: string; reason: string; message: string }>;
  /** The capacity each poll told the service. */
  readonly capacities: number[];
}

function run(t: TestContext, fx: GitHubFixture, options: { name?: string; recordedSessionId?: string; faults?: FaultPoints; owner?: string; capacity?: () => number } = {}): { rec: Recorded; stop: () => Promise<void>; listener: ScaleSetListener } {
  const rec: Recorded = { states: [], stats: [], jobs: [], events: [], capacities: [] };
  const client = new ScaleSetClient({ registrationTokens: fx.client(), apiBaseUrl: fx.server.url, scope: { kind: "repo", ...REPO }, retry: { baseMs: 20, factor: 2, capMs: 100, jitter: 0, maxAttempts: 2 } });
  const spec: ListenerSpec = { poolKey: "ns/pool", scaleSetName: options.name ?? "imp-pool", runnerGroup: "Default", labels: ["linux"], maxCapacity: 4, recordedSessionId: options.recordedSessionId };
  const listener = new ScaleSetListener({
    spec,
    client: async () => client,
    sink: {
      statistics: (_k, s) => rec.stats.push(s),
      job: (_k, j) => rec.jobs.push(j),
      state: (_k, s) => rec.states.push(s),
      event: (_k, type, reason, message) => rec.events.push({ type, reason, message }),
      capacity: (_k, c) => rec.capacities.push(c),
    },
    ownerName: options.owner ?? "operator-test",
    logger: createLogger({ level: process.env["IMP_TEST_LOG"] ?? "silent", name: "listener" }),
    timings: TIMINGS,
    ...(options.faults === undefined ? {} : { faults: options.faults }),
    ...(options.capacity === undefined ? {} : { capacity: options.capacity }),
  });
  const abort = new AbortController();
  const done = listener.run(abort.signal);
  const stop = async (): Promise<void> => {
    abort.abort();
    await done;
  };
  t.after(stop);
  return { rec, stop, listener };
}

const reasons = (rec: Recorded): string[] => rec.states.map((s) => s.reason).filter((r, i, all) => i === 0 || all[i - 1] !== r);
const last = <T>(xs: readonly T[]): T | undefined => xs[xs.length - 1];

test("creates the scale set with its name first, listens, acquires a job, and scales on totalAssignedJobs", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300 } });
  const { rec, stop } = run(t, fx);
  await waitFor("listening", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  const set = fx.server.actions.scaleSetNamed("imp-pool");
  assert.ok(set !== undefined);
  assert.deepEqual(set.labels, [{ type: "System", name: "imp-pool" }, { type: "System", name: "linux" }]);
  assert.ok(rec.events.some((e) => e.reason === "ScaleSetCreated"), "the creation is an Event");
  const job = fx.server.queueJob({ repo: REPO, labels: ["imp-pool"], steps: [] });
  await waitFor("the job assigned", () => (last(rec.stats)?.totalAssignedJobs === 1 ? true : undefined), WAIT);
  assert.equal(job.scaleSetId, set.id);
  assert.ok(rec.jobs.some((j) => j.messageType === "JobAvailable" && j.runnerRequestId === job.id));
  await waitFor("every message acknowledged", () => (set.messages.length === 0 ? true : undefined), WAIT);
  await stop();
  assert.equal(set.session, undefined, "a stopped listener closes its session, so the next one need not wait for it to expire");
});

test("a session left by a crashed leader: 409s are retried until GitHub expires it — or closed at once when the pool's status recorded it", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300, sessionIdleMs: 1_500 } });
  const client = new ScaleSetClient({ registrationTokens: fx.client(), apiBaseUrl: fx.server.url, scope: { kind: "repo", ...REPO } });
  const set = await client.createScaleSet({ name: "imp-pool", runnerGroupId: 1, labels: [{ type: "System", name: "imp-pool" }] });
  // The crashed leader's session: opened, never polled again, never closed.
  await client.createSession(set.id, "dead-leader");
  const started = Date.now();
  const { rec, stop } = run(t, fx);
  await waitFor("listening after the stale session expired", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  assert.ok(Date.now() - started >= 1_000, "it had to wait for GitHub to expire the stale session");
  assert.deepEqual(reasons(rec).slice(0, 3), ["Starting", "SessionConflict", "Listening"]);
  assert.equal(rec.events.filter((e) => e.reason === "SessionConflict").length, 1, "one Warning for the whole conflict, not one per retry");
  assert.ok(fx.server.requestsTo(/\/sessions$/, "POST").filter((r) => r.status === 409).length >= 2, "409 was met and retried");
  await stop();

  // Again, but the pool's status recorded the dead leader's session: it is closed first, no 409 at all.
  const dead = await client.createSession(set.id, "dead-leader");
  const conflictsBefore = fx.server.requestsTo(/\/sessions$/, "POST").filter((r) => r.status === 409).length;
  const second = run(t, fx, { recordedSessionId: dead.id });
  await waitFor("listening", () => (last(second.rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  assert.equal(fx.server.requestsTo(/\/sessions$/, "POST").filter((r) => r.status === 409).length, conflictsBefore, "the recorded session was closed, so opening met no 409");
  assert.ok(!reasons(second.rec).includes("SessionConflict"));
});

test("token expiry mid-poll is refreshed silently; a session gone on GitHub and a scale set deleted on GitHub are recovered with a Warning each", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300 } });
  const { rec } = run(t, fx);
  await waitFor("listening", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  const set = fx.server.actions.scaleSetNamed("imp-pool");
  assert.ok(set?.session !== undefined);

  const sessionBefore = set.session.id;
  fx.server.actions.expireQueueTokens();
  await waitFor("a refresh", () => (fx.server.requestsTo(/\/sessions\/[\w-]+$/, "PATCH").length > 0 ? true : undefined), WAIT);
  const job = fx.server.queueJob({ repo: REPO, labels: ["imp-pool"], steps: [] });
  await waitFor("the job acquired with the refreshed token", () => (job.scaleSetId === set.id ? true : undefined), WAIT);
  assert.equal(set.session?.id, sessionBefore, "a refresh keeps the session");
  assert.ok(!rec.events.some((e) => e.reason === "QueueTokenExpired"), "an expiry that a refresh cures is no Warning");

  fx.server.actions.dropSession(set.id);
  await waitFor("a new session", () => (set.session !== undefined && set.session.id !== sessionBefore ? true : undefined), WAIT);
  assert.ok(rec.events.some((e) => e.type === "Warning" && e.reason === "SessionLost"));
  await waitFor("listening again", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);

  fx.server.actions.deleteScaleSet(set.id);
  await waitFor("the scale set created again", () => {
    const again = fx.server.actions.scaleSetNamed("imp-pool");
    return again !== undefined && again.id !== set.id && again.session !== undefined ? again : undefined;
  }, WAIT);
  assert.ok(rec.events.some((e) => e.type === "Warning" && e.reason === "ScaleSetDeleted"));
  await waitFor("listening on the new scale set", () => (last(rec.states)?.reason === "Listening" && last(rec.states)?.scaleSetId !== set.id ? true : undefined), WAIT);
});

test("a message acted on but not acknowledged (a crash before the ack) comes again, and the job is not acquired twice", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300 } });
  const faults = new FaultPoints([{ point: "listener.before-ack", action: { kind: "fail" }, onHit: 1 }]);
  const { rec } = run(t, fx, { faults });
  await waitFor("listening", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  const job = fx.server.queueJob({ repo: REPO, labels: ["imp-pool"], steps: [] });
  await waitFor("the JobAvailable handled twice", () => (rec.jobs.filter((j) => j.messageType === "JobAvailable" && j.runnerRequestId === job.id).length >= 2 ? true : undefined), WAIT);
  const set = fx.server.actions.scaleSetNamed("imp-pool");
  await waitFor("acknowledged the second time", () => (set?.messages.length === 0 ? true : undefined), WAIT);
  assert.equal(job.scaleSetId, set?.id);
  const acquires = fx.server.requestsTo(/\/acquirejobs$/, "POST");
  assert.ok(acquires.length >= 2, "the redelivered JobAvailable was acquired again (a no-op on GitHub)");
  assert.equal(last(rec.stats)?.totalAssignedJobs, 1, "still one job: acting twice counted nothing twice");
});

test("the Actions service down for a while: a Warning, backoff, then listening again with no job lost", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300 } });
  const { rec } = run(t, fx);
  await waitFor("listening", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  fx.server.actions.failUntil = Date.now() + 2_000;
  fx.server.injectFault({ kind: "server-error", status: 503, count: 20, path: /^\/_services\/queue\// });
  const job = fx.server.queueJob({ repo: REPO, labels: ["imp-pool"], steps: [] });
  await waitFor("unavailable", () => (rec.states.some((s) => s.reason === "ActionsServiceUnavailable") ? true : undefined), WAIT);
  assert.ok(rec.events.some((e) => e.type === "Warning" && e.reason === "ActionsServiceUnavailable"));
  await waitFor("the job acquired after the outage", () => (job.scaleSetId !== undefined ? true : undefined), WAIT);
  await waitFor("listening again", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
});

test("a job no runner took in time is cancelled for the scale set and offered again: the listener acquires it again and demand stays one job", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300, reassignAfterMs: 1_000 } });
  const { rec } = run(t, fx);
  await waitFor("listening", () => (last(rec.states)?.reason === "Listening" ? true : undefined), WAIT);
  const job = fx.server.queueJob({ repo: REPO, labels: ["imp-pool"], steps: [] });
  // The server is in this process: it marks the job acquired before the listener has the answer and
  // records the message, so the wait covers both.
  const offers = (): number => rec.jobs.filter((j) => j.messageType === "JobAvailable" && j.runnerRequestId === job.id).length;
  await waitFor("the job re-offered and acquired again", () => ((job.reoffers ?? 0) >= 1 && job.scaleSetId !== undefined && offers() >= 2 ? true : undefined), WAIT);
  const canceled = rec.jobs.find((j) => j.messageType === "JobCompleted" && j.runnerRequestId === job.id);
  assert.ok(canceled !== undefined && canceled.messageType === "JobCompleted");
  assert.equal(canceled.result, "canceled");
  assert.equal(canceled.runnerName, "", "cancelled for the scale set, never on a runner");
  await waitFor("demand one job", () => (last(rec.stats)?.totalAssignedJobs === 1 ? true : undefined), WAIT);
});

test("capacity-honest: each poll tells GitHub what the cluster can hold now; none is acquired beyond it, and room that appears is said at once, not after the long poll", async (t) => {
  // A long poll as long as GitHub's (50 s): only nudge() can make the listener say more before then.
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 50_000 } });
  let capacity = 0;
  const { rec, listener } = run(t, fx, { capacity: () => capacity });
  // The capacity as the server has it: the listener records it before its request is sent.
  await waitFor("the service told capacity 0", () => (last(rec.states)?.reason === "Listening" && fx.server.actions.scaleSetNamed("imp-pool")?.maxCapacity === 0 ? true : undefined), WAIT);
  const set = fx.server.actions.scaleSetNamed("imp-pool");
  assert.ok(set !== undefined);
  const jobs = [1, 2, 3, 4, 5, 6].map((i) => fx.server.queueJob({ repo: REPO, labels: ["imp-pool"], steps: [], name: `burst-${i}` }));
  await waitFor("the burst counted as available", () => (fx.server.actions.statistics(set).totalAvailableJobs === 6 ? true : undefined), WAIT);
  assert.deepEqual(set.capacities, [0], "one poll in flight, which said 0");
  assert.equal(set.offers.size, 0, "capacity 0: nothing offered (so nothing can be acquired)");
  capacity = 2;
  listener.nudge();
  // WAIT (30 s) is shorter than the poll in flight (50 s): only the nudge can get these acquired in time.
  await waitFor("two acquired", () => (fx.server.actions.assignedTo(set) === 2 ? true : undefined), WAIT);
  assert.deepEqual(jobs.filter((j) => j.scaleSetId === set.id).map((j) => j.name), ["burst-1", "burst-2"], "oldest first");
  await waitFor("the statistics show four still waiting", () => (last(rec.stats)?.totalAvailableJobs === 4 && last(rec.stats)?.totalAssignedJobs === 2 ? true : undefined), WAIT);
  capacity = 100;
  listener.nudge();
  await waitFor("the rest acquired up to the pool's maxCapacity (4)", () => (fx.server.actions.assignedTo(set) === 4 ? true : undefined), WAIT);
  assert.equal(Math.max(...set.capacities), 4, "never more than the pool's maxConcurrent is said");
  assert.equal(fx.server.actions.assignedTo(set), 4);
});
