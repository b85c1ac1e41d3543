import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { acceptWebhook } from "./webhook.ts";
import { verifyWebhookSignature } from "./webhook-signature.ts";
import { parseWorkflowJobWebhook } from "./workflow-job-event.ts";

const sign = (secret: string, body: string): string => `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;

function payload(overrides: Record<string, unknown> = {}, job: Record<string, unknown> = {}): string {
  return JSON.stringify({
    action: "queued",
    workflow_job: { id: 42, run_id: 7, run_attempt: 1, name: "build", labels: ["self-hosted", "imp"], runner_name: null, runner_id: null, runner_group_name: null, conclusion: null, ...job },
    repository: { name: "web", full_name: "acme/web", owner: { login: "acme" } },
    organization: { login: "acme" },
    installation: { id: 99 },
    ...overrides,
  });
}

const headers = (body: string, secret = "s3cret", extra: Record<string, string> = {}): Record<string, string> => ({
  "x-hub-signature-256": sign(secret, body),
  "x-github-event": "workflow_job",
  "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
  ...extra,
});

test("a correctly signed workflow_job queued delivery is accepted and parsed", async () => {
  const body = payload();
  const verdict = await acceptWebhook({ headers: headers(body), body: Buffer.from(body) }, { secrets: ["s3cret"] });
  assert.equal(verdict.kind, "accepted");
  assert.ok(verdict.kind === "accepted");
  assert.deepEqual(verdict.event, {
    deliveryId: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    action: "queued",
    jobId: 42,
    runId: 7,
    runAttempt: 1,
    jobName: "build",
    labels: ["self-hosted", "imp"],
    runnerName: null,
    runnerId: null,
    runnerGroupName: null,
    conclusion: null,
    repository: { owner: "acme", name: "web", fullName: "acme/web" },
    organization: "acme",
    enterprise: undefined,
    installationId: 99,
  });
});

test("a forged signature is rejected as not authentic", async () => {
  const body = payload();
  const verdict = await acceptWebhook({ headers: headers(body, "other-secret"), body: Buffer.from(body) }, { secrets: ["s3cret"] });
  assert.deepEqual(verdict, { kind: "rejected", reason: "signature does not match any configured secret", authentic: false });
});

test("a body changed after signing is rejected", async () => {
  const body = payload();
  const tampered = body.replace('"build"', '"pwned"');
  const verdict = await acceptWebhook({ headers: headers(body), body: Buffer.from(tampered) }, { secrets: ["s3cret"] });
  assert.equal(verdict.kind, "rejected");
});

test("during rotation either of two secrets verifies, and which one matched is reported", async () => {
  const body = payload();
  const oldSig = await verifyWebhookSignature(Buffer.from(body), sign("old", body), ["old", "new"]);
  const newSig = await verifyWebhookSignature(Buffer.from(body), sign("new", body), ["old", "new"]);
  const neither = await verifyWebhookSignature(Buffer.from(body), sign("older", body), ["old", "new"]);
  assert.deepEqual(oldSig, { ok: true, secretIndex: 0 });
  assert.deepEqual(newSig, { ok: true, secretIndex: 1 });
  assert.equal(neither.ok, false);
});

test("zero or three secrets, or an empty one, is a programming error", async () => {
  await assert.rejects(verifyWebhookSignature(Buffer.from("x"), sign("a", "x"), []), TypeError);
  await assert.rejects(verifyWebhookSignature(Buffer.from("x"), sign("a", "x"), ["a", "b", "c"]), TypeError);
  await assert.rejects(verifyWebhookSignature(Buffer.from("x"), sign("a", "x"), [""]), TypeError);
});

test("an oversize body is rejected before any HMAC is computed", async () => {
  const body = "x".repeat(2049);
  const verdict = await verifyWebhookSignature(Buffer.from(body), sign("s", body), ["s"], 2048);
  assert.deepEqual(verdict, { ok: false, reason: "body of 2049 bytes exceeds the limit of 2048" });
});

test("missing, malformed and sha1 signatures are rejected with a reason", async () => {
  const body = Buffer.from(payload());
  assert.deepEqual(await verifyWebhookSignature(body, undefined, ["s"]), { ok: false, reason: "no X-Hub-Signature-256 header" });
  assert.equal((await verifyWebhookSignature(body, "sha1=abc", ["s"])).ok, false);
  assert.equal((await verifyWebhookSignature(body, `sha256=${"g".repeat(64)}`, ["s"])).ok, false);
});

test("a body that is not UTF-8 is rejected even with a signature over its bytes", async () => {
  const body = Buffer.from([0x7b, 0xff, 0xfe, 0x7d]);
  const sig = `sha256=${createHmac("sha256", "s").update(body).digest("hex")}`;
  assert.deepEqual(await verifyWebhookSignature(body, sig, ["s"]), { ok: false, reason: "body is not valid UTF-8" });
});

test("other events and unhandled actions are rejected with a reason, though authentic", async () => {
  const push = payload();
  const pushVerdict = await acceptWebhook({ headers: headers(push, "s3cret", { "x-github-event": "push" }), body: Buffer.from(push) }, { secrets: ["s3cret"] });
  assert.deepEqual(pushVerdict, { kind: "rejected", reason: 'event "push" is not workflow_job', authentic: true, ignored: true });
  const waiting = payload({ action: "waiting" });
  const waitingVerdict = await acceptWebhook({ headers: headers(waiting), body: Buffer.from(waiting) }, { secrets: ["s3cret"] });
  assert.equal(waitingVerdict.kind, "rejected");
  assert.match(waitingVerdict.kind === "rejected" ? waitingVerdict.reason : "", /action "waiting"/);
});

test("in_progress and completed carry the runner; in_progress without one is rejected, a completed job without one must have a conclusion (cancelled while queued)", () => {
  const running = parseWorkflowJobWebhook("workflow_job", "d-1", payload({ action: "in_progress" }, { runner_name: "imp-abc", runner_id: 5, runner_group_name: "Default" }));
  assert.ok(running.ok);
  assert.equal(running.event.runnerName, "imp-abc");
  assert.equal(running.event.runnerId, 5);
  const done = parseWorkflowJobWebhook("workflow_job", "d-2", payload({ action: "completed" }, { runner_name: "imp-abc", runner_id: 5, conclusion: "success" }));
  assert.ok(done.ok);
  assert.equal(done.event.conclusion, "success");
  assert.deepEqual(parseWorkflowJobWebhook("workflow_job", "d-3", payload({ action: "in_progress" })), { ok: false, reason: "an in_progress job has no runner_name" });
  assert.deepEqual(parseWorkflowJobWebhook("workflow_job", "d-3", payload({ action: "completed" })), { ok: false, reason: "a completed job has neither a runner_name nor a conclusion" });
  // What GitHub sends for a job cancelled before any runner took it.
  const cancelled = parseWorkflowJobWebhook("workflow_job", "d-3", payload({ action: "completed" }, { runner_name: null, runner_id: null, runner_group_name: null, conclusion: "cancelled" }));
  assert.ok(cancelled.ok);
  assert.deepEqual([cancelled.event.runnerName, cancelled.event.runnerId, cancelled.event.conclusion], [null, null, "cancelled"]);
});

test("the job's created, started and completed times are read; a time that is not ISO 8601 is rejected", () => {
  const done = parseWorkflowJobWebhook(
    "workflow_job",
    "d-4",
    payload({ action: "completed" }, { runner_name: "imp-abc", conclusion: "success", created_at: "2026-01-02T03:04:05Z", started_at: "2026-01-02T03:04:07Z", completed_at: "2026-01-02T03:05:07.5+00:00" }),
  );
  assert.ok(done.ok);
  assert.equal(done.event.createdAt, Date.UTC(2026, 0, 2, 3, 4, 5));
  assert.equal(done.event.startedAt, Date.UTC(2026, 0, 2, 3, 4, 7));
  assert.equal(done.event.completedAt, Date.UTC(2026, 0, 2, 3, 5, 7, 500));
  const queued = parseWorkflowJobWebhook("workflow_job", "d-5", payload({}, { completed_at: null }));
  assert.ok(queued.ok);
  assert.equal(queued.event.completedAt, undefined);
  for (const bad of ["yesterday", "2026-13-45T99:99:99Z", 1767323045]) {
    const result = parseWorkflowJobWebhook("workflow_job", "d-6", payload({}, { created_at: bad }));
    assert.deepEqual(result, { ok: false, reason: "workflow_job.created_at is not an ISO 8601 time" });
  }
});

test("malformed payloads are rejected field by field", () => {
  const cases: Array<[string, RegExp]> = [
    ["not json", /not JSON/],
    ["[]", /payload is not an object/],
    [payload({}, { id: -1 }), /workflow_job.id/],
    [payload({}, { id: 1.5 }), /workflow_job.id/],
    [payload({}, { labels: "imp" }), /labels/],
    [payload({}, { labels: Array.from({ length: 101 }, () => "l") }), /labels/],
    [payload({}, { labels: [""] }), /labels\[0\]/],
    [payload({}, { name: "x".repeat(1025) }), /workflow_job.name/],
    [payload({ repository: { name: "web", full_name: "evil/web", owner: { login: "acme" } } }), /full_name/],
    [payload({ workflow_job: null }), /workflow_job is not an object/],
  ];
  for (const [body, reason] of cases) {
    const result = parseWorkflowJobWebhook("workflow_job", "d", body);
    assert.equal(result.ok, false, body.slice(0, 80));
    assert.match(result.ok ? "" : result.reason, reason);
  }
  assert.deepEqual(parseWorkflowJobWebhook("workflow_job", undefined, payload()), { ok: false, reason: "X-GitHub-Delivery is missing or malformed" });
  assert.equal(parseWorkflowJobWebhook("workflow_job", "bad id!", payload()).ok, false);
});
