import { test } from "node:test";
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { ScaleSetClient, ScaleSetErrorCode, type GitHubScope, type ScaleSetSession } from "../../src/forge/index.ts";
import { ImpError } from "../../src/shared/index.ts";
import { startGitHub, type GitHubFixture } from "./harness.ts";

// Imp's scale-set client (src/forge/github/scaleset) against the GitHub test server, whose scale-set API
// scale-set-conformance.test.ts holds to the real Go module: the auth chain and its refresh, the
// session rules (409, refresh, 404), at-least-once delivery, acquisition, runners, and errors that
// carry no credential.

const REPO: GitHubScope = { kind: "repo", owner: "acme", repo: "web" };
const FAST_RETRY = { baseMs: 20, factor: 2, capMs: 100, jitter: 0, maxAttempts: 4 };

function clientOf(fx: GitHubFixture, options: { retry?: typeof FAST_RETRY } = {}): ScaleSetClient {
  return new ScaleSetClient({ registrationTokens: fx.client(), apiBaseUrl: fx.server.url, scope: REPO, retry: options.retry ?? FAST_RETRY });
}

async function rejectsWith(p: Promise<unknown>, code: string): Promise<ImpError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ImpError, `expected an ImpError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected ${code}, but it succeeded`);
}

test("the auth chain runs once, then again only when the admin token nears its exp", async (t) => {
  const fx = await startGitHub(t, { actionsService: { adminTokenTtlSeconds: 61 } });
  const client = clientOf(fx);
  assert.equal(await client.findScaleSet("none", 1), undefined);
  assert.equal(await client.findScaleSet("none", 1), undefined);
  // 61 s of life and a 60 s margin: after a second the token counts as expiring and is renewed.
  const registrations = (): number => fx.server.requestsTo(/^\/actions\/runner-registration$/, "POST").length;
  const before = registrations();
  await new Promise((r) => setTimeout(r, 1_100));
  await client.findScaleSet("none", 1);
  assert.equal(registrations(), before + 1, "a token within a minute of its exp is replaced before use");
  assert.equal(fx.server.requestsTo(/registration-token$/, "POST").length, registrations(), "each renewal buys a fresh registration token (REST, held to the OpenAPI description)");
});

test("find-or-create, a session that excludes a second, refresh after a queue token expiry, and 404 once the session is gone", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300 } });
  const client = clientOf(fx);
  const created = await client.createScaleSet({ name: "imp-a", runnerGroupId: 1, labels: [{ type: "System", name: "imp-a" }] });
  assert.deepEqual(await client.findScaleSet("imp-a", 1), created);
  const session = await client.createSession(created.id, "operator-1");
  assert.equal(session.statistics.totalAssignedJobs, 0);
  const conflict = await rejectsWith(client.createSession(created.id, "operator-2"), ScaleSetErrorCode.SessionConflict);
  assert.equal(conflict.errorClass, "conflict");
  assert.equal(await client.getMessage(session, 0, 5), undefined, "an empty queue answers 202 after its long poll");

  fx.server.actions.expireQueueTokens();
  await rejectsWith(client.getMessage(session, 0, 5), ScaleSetErrorCode.QueueTokenExpired);
  const refreshed = await client.refreshSession(session);
  assert.equal(refreshed.id, session.id);
  assert.notEqual(refreshed.queueToken.reveal(), session.queueToken.reveal());
  assert.equal(await client.getMessage(refreshed, 0, 5), undefined);

  fx.server.actions.dropSession(created.id);
  // A dropped session's token stops working (401, as an expiry); only the refresh tells it is gone.
  await rejectsWith(client.getMessage(refreshed, 0, 5), ScaleSetErrorCode.QueueTokenExpired);
  await rejectsWith(client.refreshSession(refreshed), ScaleSetErrorCode.SessionNotFound);
  const again = await client.createSession(created.id, "operator-1");
  await client.deleteSession(again);
  await client.deleteSession(again); // already gone: done
  await client.createSession(created.id, "operator-1");

  fx.server.actions.deleteScaleSet(created.id);
  await rejectsWith(client.getScaleSet(created.id), ScaleSetErrorCode.ScaleSetNotFound);
  await rejectsWith(client.createSession(created.id, "operator-1"), ScaleSetErrorCode.ScaleSetNotFound);
  assert.equal(await client.findScaleSet("imp-a", 1), undefined);
});

test("a message comes again until it is deleted; acquisition is first come, first served; statistics count assigned jobs", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300 } });
  const client = clientOf(fx);
  const a = await client.createScaleSet({ name: "imp-b", runnerGroupId: 1, labels: [{ type: "System", name: "imp-b" }] });
  const sa: ScaleSetSession = await client.createSession(a.id, "op");
  const job = fx.server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp-b"], steps: [] });
  const first = await client.getMessage(sa, 0, 5);
  assert.ok(first !== undefined);
  assert.equal(first.jobs[0]?.messageType, "JobAvailable");
  assert.equal(first.jobs[0]?.runnerRequestId, job.id);
  assert.equal(first.statistics.totalAvailableJobs, 1);
  const redelivered = await client.getMessage(sa, 0, 5);
  assert.equal(redelivered?.id, first.id, "not acknowledged: delivered again");
  assert.deepEqual(await client.acquireJobs(sa, [job.id]), [job.id]);
  assert.deepEqual(await client.acquireJobs(sa, [job.id]), [], "a job acquired already is not acquired twice");
  await client.deleteMessage(sa, first.id);
  const assigned = await client.getMessage(sa, first.id, 5);
  assert.equal(assigned?.jobs[0]?.messageType, "JobAssigned");
  assert.equal(assigned?.statistics.totalAssignedJobs, 1, "an acquired job counts as assigned until it completes");
  assert.equal(assigned?.statistics.totalAvailableJobs, 0);
});

test("X-ScaleSetMaxCapacity: no more jobs offered than the scale set can hold; the rest wait, counted, and come as its capacity grows", async (t) => {
  const fx = await startGitHub(t, { actionsService: { queuePollMs: 300, reofferAfterMs: 1_500 } });
  const client = clientOf(fx);
  const created = await client.createScaleSet({ name: "imp-cap", runnerGroupId: 1, labels: [{ type: "System", name: "imp-cap" }] });
  const set = fx.server.actions.scaleSets.get(created.id);
  assert.ok(set !== undefined);
  const session = await client.createSession(created.id, "op");
  let last = 0;
  /** Reads and acknowledges every message there is; the JobAvailable ids in them, and the last statistics. */
  const drain = async (capacity: number): Promise<{ offered: number[]; available: number; assigned: number }> => {
    const offered: number[] = [];
    let stats = { totalAvailableJobs: -1, totalAssignedJobs: -1 };
    for (;;) {
      const m = await client.getMessage(session, last, capacity);
      if (m === undefined) return { offered, available: stats.totalAvailableJobs, assigned: stats.totalAssignedJobs };
      offered.push(...m.jobs.filter((j) => j.messageType === "JobAvailable").map((j) => j.runnerRequestId));
      stats = m.statistics;
      await client.deleteMessage(session, m.id);
      last = m.id;
    }
  };
  assert.deepEqual((await drain(2)).offered, [], "nothing queued yet; the service now knows the capacity: 2");
  const jobs = [1, 2, 3, 4, 5].map((i) => fx.server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp-cap"], steps: [], name: `j${i}` }));
  const first = await drain(2);
  assert.deepEqual(first.offered, [jobs[0]?.id, jobs[1]?.id], "the two oldest, no more");
  assert.equal(first.available, 5, "all five wait and are counted");
  assert.deepEqual(await client.acquireJobs(session, first.offered), first.offered);
  const full = await drain(2);
  assert.deepEqual(full.offered, [], "two assigned fill a capacity of two");
  assert.equal(full.assigned, 2);
  assert.equal(full.available, 3);
  const grown = await drain(3);
  assert.deepEqual(grown.offered, [jobs[2]?.id], "a capacity of three makes room for the next oldest");
  // Not acquired: the offer holds its place until reofferAfterMs, then it is made again.
  assert.deepEqual((await drain(3)).offered, [], "an open offer counts against the capacity");
  // Wait until the open offer has expired (reofferAfterMs), seen from the test's side of the clock.
  const offeredAt = set.offers.get(jobs[2]?.id ?? 0) ?? Date.now();
  await new Promise((r) => setTimeout(r, Math.max(0, offeredAt + 1_600 - Date.now())));
  assert.deepEqual((await drain(0)).offered, [], "capacity 0: nothing offered, though an offer's place just freed");
  assert.deepEqual((await drain(3)).offered, [jobs[2]?.id], "an offer not taken in time is made again");
});

test("runners: generatejitconfig, a taken name, lookup by name, removal and its idempotence", async (t) => {
  const fx = await startGitHub(t);
  const client = clientOf(fx);
  const set = await client.createScaleSet({ name: "imp-c", runnerGroupId: 1, labels: [{ type: "System", name: "imp-c" }] });
  const jit = await client.generateJitConfig(set.id, "imp-c-abcde");
  assert.equal(jit.runnerName, "imp-c-abcde");
  await rejectsWith(client.generateJitConfig(set.id, "imp-c-abcde"), ScaleSetErrorCode.RunnerExists);
  assert.deepEqual(await client.findRunner("imp-c-abcde"), { id: jit.runnerId, name: "imp-c-abcde", scaleSetId: set.id });
  assert.equal(await client.findRunner("imp-c-zzzzz"), undefined);
  fx.server.setRunnerState(jit.runnerId, { busy: true });
  assert.equal(await client.removeRunner(jit.runnerId), "busy");
  fx.server.setRunnerState(jit.runnerId, { busy: false });
  assert.equal(await client.removeRunner(jit.runnerId), "deleted");
  assert.equal(await client.removeRunner(jit.runnerId), "gone");
});

test("5xx are retried with backoff, then surface as the retryable ActionsServiceUnavailable; no error or log line carries a credential", async (t) => {
  const fx = await startGitHub(t);
  const client = clientOf(fx);
  const set = await client.createScaleSet({ name: "imp-d", runnerGroupId: 1, labels: [{ type: "System", name: "imp-d" }] });
  fx.server.injectFault({ kind: "server-error", status: 503, count: 2, path: /runnerscalesets\/\d+$/ });
  assert.equal((await client.getScaleSet(set.id)).name, "imp-d", "two 503s, then an answer: within the retry budget");
  fx.server.injectFault({ kind: "server-error", status: 500, count: 10, path: /runnerscalesets\/\d+$/ });
  const err = await rejectsWith(client.getScaleSet(set.id), ScaleSetErrorCode.Unavailable);
  assert.equal(err.errorClass, "retryable");
  const session = await client.createSession(set.id, "op");
  const printed = `${err.message} ${JSON.stringify(err.context)} ${inspect(session)} ${JSON.stringify(session)}`;
  assert.doesNotMatch(printed, new RegExp(session.queueToken.reveal().replace(/[^\w]/g, ".")), "the queue token never prints");
  assert.match(inspect(session), /message queue token \[redacted\]/);
});
