import { test } from "node:test";
import assert from "node:assert/strict";
import type { GitHubScope } from "../../src/forge/index.ts";
import { receiveWebhooks, startGitHub } from "./harness.ts";
import type { GitHubTestServer } from "./server.ts";

// The test server alone, driven through its runner session API as a runner would: a runner that
// goes silent (its VM died) loses its job and its busy flag within the job-lock timeout, as on
// GitHub, and a job cancelled while queued completes without a runner.

const ORG: GitHubScope = { kind: "org", org: "acme" };
const REPO = { owner: "acme", repo: "web" };
const LOCK_MS = 3_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await sleep(20);
  }
}

/** A runner session opened with a registered runner's one-time secret. */
async function openSession(server: GitHubTestServer, name: string): Promise<{ runnerId: number; post: (path: string, signal?: AbortSignal) => Promise<{ status: number; body: unknown }> }> {
  const { runner } = server.registerRunner("org:acme", { name, runner_group_id: 1, labels: ["imp"] });
  const base = `${server.url}/_imp-test/runner`;
  const call = async (path: string, body?: unknown, signal?: AbortSignal): Promise<{ status: number; body: unknown }> => {
    const response = await fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }), ...(signal === undefined ? {} : { signal }) });
    const text = await response.text();
    return { status: response.status, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
  };
  const opened = await call("/sessions", { runnerId: runner.id, runnerName: name, secret: runner.secret });
  assert.equal(opened.status, 201);
  const session = (opened.body as { sessionId: string }).sessionId;
  return { runnerId: runner.id, post: (path, signal) => call(`/sessions/${session}${path}`, undefined, signal) };
}

test("a job whose runner stops renewing its lock fails after jobLockTimeoutMs; the runner goes offline, is freed and, ephemeral with its job done, removed", async (t) => {
  const { server, client } = await startGitHub(t, { jobLockTimeoutMs: LOCK_MS });
  const hooks = await receiveWebhooks(t, server);
  const github = client();
  const runner = await openSession(server, "imp-lost-1");
  const job = server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "long", run: "sleep 60" }] });
  const acquired = await runner.post("/acquire?waitSeconds=5");
  assert.equal(acquired.status, 200);
  assert.equal((acquired.body as { job: { id: number }; renewSeconds: number }).job.id, job.id);
  assert.equal((acquired.body as { renewSeconds: number }).renewSeconds, 1, "a few renewals per lock timeout");
  assert.equal((await github.getRunner(ORG, runner.runnerId))?.busy, true);

  // Renewing keeps the job for longer than the timeout...
  const renewedUntil = Date.now() + 2 * LOCK_MS;
  while (Date.now() < renewedUntil) {
    assert.equal((await runner.post(`/jobs/${job.id}/renew`)).status, 200);
    await sleep(200);
  }
  assert.equal(job.status, "in_progress", "a job whose lock is renewed is kept past the timeout");
  assert.equal(await github.deleteRunner(ORG, runner.runnerId), "busy", "GitHub refuses to delete a runner that runs a job");

  // ...then the runner goes silent (its VM died): nobody asks the server anything; its timer acts.
  await until("the lost job completed", () => job.status === "completed");
  assert.equal(job.conclusion, "failure");
  assert.match(job.result?.log ?? "", /The self-hosted runner: imp-lost-1 lost communication with the server/);
  assert.ok((job.completedAt ?? 0) - (job.renewedAt ?? 0) > LOCK_MS, "failed only after the lock timeout");
  assert.equal(server.runners.get(runner.runnerId), undefined, "an ephemeral runner whose job ended is removed, as when its session closes");
  assert.equal(await github.deleteRunner(ORG, runner.runnerId), "gone", "the operator's delete is done, not refused as busy");
  await server.webhooks.settled();
  assert.deepEqual(hooks.rejected, []);
  const completed = hooks.events.filter((e) => e.jobId === job.id && e.action === "completed");
  assert.deepEqual(completed.map((e) => [e.runnerName, e.conclusion]), [["imp-lost-1", "failure"]], "webhook completed, as GitHub sends it");

  // A renewal or a result after the loss is refused: the runner no longer holds the job.
  assert.equal((await runner.post(`/jobs/${job.id}/renew`)).status, 404);
  assert.equal((await runner.post(`/jobs/${job.id}/result`)).status, 404);
});

test("an open session that stops polling is closed as lost: offline, not busy, still registered and deletable", async (t) => {
  const { server, client } = await startGitHub(t, { jobLockTimeoutMs: LOCK_MS });
  const github = client();
  const runner = await openSession(server, "imp-lost-2");
  assert.equal((await github.getRunner(ORG, runner.runnerId))?.status, "online");
  // A long poll keeps it online past the timeout: it is alive while it waits.
  const poll = runner.post(`/acquire?waitSeconds=${(3 * LOCK_MS) / 1000}`);
  await sleep(2 * LOCK_MS);
  assert.equal((await github.getRunner(ORG, runner.runnerId))?.status, "online", "alive throughout its long poll");
  assert.equal((await poll).status, 204);
  await until("the silent runner is offline", () => server.runners.get(runner.runnerId)?.status === "offline");
  assert.deepEqual(await github.getRunner(ORG, runner.runnerId).then((r) => [r?.status, r?.busy]), ["offline", false]);
  assert.equal((await runner.post("/acquire?waitSeconds=0")).status, 404, "its session is gone");
  assert.equal(await github.deleteRunner(ORG, runner.runnerId), "deleted");
});

test("a runner that hangs up in a long poll is not handed a job, and goes offline", async (t) => {
  const { server, client } = await startGitHub(t, { jobLockTimeoutMs: LOCK_MS });
  const runner = await openSession(server, "imp-lost-3");
  const hangUp = new AbortController();
  const poll = runner.post("/acquire?waitSeconds=30", hangUp.signal).catch((err: unknown) => err);
  await until("the poll arrived", () => (server.runners.get(runner.runnerId)?.seenUntil ?? 0) > Date.now() + 10_000);
  hangUp.abort();
  assert.ok((await poll) instanceof Error);
  await until("the server saw the hang-up", () => server.requestsTo(/\/acquire$/).length === 1);
  const job = server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "x", run: "true" }] });
  await until("the runner is offline", () => server.runners.get(runner.runnerId)?.status === "offline");
  assert.equal(job.status, "queued", "the job waits for a live runner");
  assert.equal((await client().getRunner(ORG, runner.runnerId))?.busy, false);
});

test("cancelJob: a queued job completes cancelled without a runner, as GitHub sends it; a running job's runner learns it at its next renewal", async (t) => {
  const { server } = await startGitHub(t, { jobLockTimeoutMs: LOCK_MS });
  const hooks = await receiveWebhooks(t, server);
  const queued = server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "x", run: "true" }] });
  assert.equal(server.cancelJob(queued.id), true);
  assert.equal(server.cancelJob(queued.id), false, "a completed job stays as it is");
  assert.deepEqual([queued.status, queued.conclusion, queued.runnerName], ["completed", "cancelled", undefined]);

  const runner = await openSession(server, "imp-cancel-1");
  const running = server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "long", run: "sleep 60" }] });
  assert.equal((await runner.post("/acquire?waitSeconds=5")).status, 200);
  assert.equal(server.cancelJob(running.id), true);
  const renewal = await runner.post(`/jobs/${running.id}/renew`);
  assert.equal(renewal.status, 409);
  assert.equal((renewal.body as { error: string }).error, "JobCancelled");
  assert.equal(server.runners.get(runner.runnerId)?.busy, false);

  await server.webhooks.settled();
  // The receiver parsed both with parseWorkflowJobWebhook (no 400), and the payloads held to the schema (the harness checks).
  assert.deepEqual(hooks.rejected, []);
  const done = hooks.events.filter((e) => e.action === "completed").map((e) => [e.jobId, e.runnerName, e.runnerId, e.conclusion]);
  assert.deepEqual(done, [
    [queued.id, null, null, "cancelled"],
    [running.id, "imp-cancel-1", runner.runnerId, "cancelled"],
  ]);

  // Over HTTP too, for servers in another process.
  const other = server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "x", run: "true" }] });
  const cancel = (id: number): Promise<number> => fetch(`${server.url}/_imp-test/control/jobs/${id}/cancel`, { method: "POST" }).then((r) => r.status);
  assert.equal(await cancel(other.id), 204);
  assert.equal(await cancel(other.id), 409);
  assert.equal(await cancel(999_999), 404);
  assert.equal(other.conclusion, "cancelled");
});
