import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { acceptGiteaWebhook } from "./webhook.ts";

// A queued delivery as Gitea 1.27.3 sent it here (its body as captured; the sender trimmed).
const QUEUED = JSON.parse(readFileSync(join(import.meta.dirname, "testdata/workflow-job-queued.json"), "utf8")) as Record<string, unknown>;
const SECRET = "gitea-hook-secret";
const sign = (body: string, secret = SECRET): string => createHmac("sha256", secret).update(body).digest("hex");

function delivery(body: string, headers: Record<string, string> = {}) {
  return { headers: { "x-gitea-event": "workflow_job", "x-gitea-delivery": "1ecd42bb-30b9-4054-8d09-a8f6cbd40519", "x-gitea-signature": sign(body), ...headers }, body: Buffer.from(body) };
}

test("a queued delivery of the real Gitea: signature checked, organization from `name`, unset times left unset", async () => {
  const body = JSON.stringify(QUEUED);
  const verdict = await acceptGiteaWebhook(delivery(body), { secrets: ["old-secret", SECRET] });
  assert.equal(verdict.kind, "accepted", JSON.stringify(verdict));
  if (verdict.kind !== "accepted") return;
  const e = verdict.event;
  assert.deepEqual([e.action, e.jobId, e.runId, e.jobName, e.labels, e.runnerName], ["queued", 1, 1, "build", ["probe-label"], null]);
  assert.deepEqual(e.repository, { owner: "o1", name: "r1", fullName: "o1/r1" });
  assert.equal(e.organization, "o1");
  assert.equal(e.createdAt, Date.parse("2026-12-06T12:47:13Z"));
  assert.equal(e.startedAt, undefined, "Gitea writes 1970-01-01T00:00:00Z for a job not started");
  assert.equal(e.completedAt, undefined);
});

test("a wrong, missing or GitHub-only signature is refused as not authentic", async () => {
  const body = JSON.stringify(QUEUED);
  const wrong = await acceptGiteaWebhook(delivery(body, { "x-gitea-signature": sign(body, "another") }), { secrets: [SECRET] });
  assert.deepEqual(wrong, { kind: "rejected", reason: "signature does not match any configured secret", authentic: false });
  const tampered = await acceptGiteaWebhook({ ...delivery(body), body: Buffer.from(body.replace('"probe-label"', '"other-label"')) }, { secrets: [SECRET] });
  assert.equal(tampered.kind === "rejected" && !tampered.authentic, true, "a body changed after signing");
  const { "x-gitea-signature": _dropped, ...unsigned } = delivery(body).headers;
  const githubOnly = await acceptGiteaWebhook({ headers: { ...unsigned, "x-hub-signature-256": `sha256=${sign(body)}` }, body: Buffer.from(body) }, { secrets: [SECRET] });
  assert.deepEqual(githubOnly, { kind: "rejected", reason: "no X-Gitea-Signature header", authentic: false });
  const prefixed = await acceptGiteaWebhook(delivery(body, { "x-gitea-signature": `sha256=${sign(body)}` }), { secrets: [SECRET] });
  assert.deepEqual(prefixed, { kind: "rejected", reason: "X-Gitea-Signature is not <64 hex digits>", authentic: false });
});

test("authentic but not acted on: other events and the `waiting` action are ignored; a malformed payload is bad input", async () => {
  const push = JSON.stringify({ ref: "refs/heads/main" });
  assert.deepEqual(await acceptGiteaWebhook(delivery(push, { "x-gitea-event": "push" }), { secrets: [SECRET] }), { kind: "rejected", reason: 'event "push" is not workflow_job', authentic: true, ignored: true });
  const waiting = JSON.stringify({ ...QUEUED, action: "waiting" });
  const ignored = await acceptGiteaWebhook(delivery(waiting), { secrets: [SECRET] });
  assert.equal(ignored.kind === "rejected" && ignored.ignored, true);
  const noDelivery = await acceptGiteaWebhook(delivery(JSON.stringify(QUEUED), { "x-gitea-delivery": "" }), { secrets: [SECRET] });
  assert.deepEqual(noDelivery, { kind: "rejected", reason: "X-Gitea-Delivery is missing or malformed", authentic: true });
  const badRepo = JSON.stringify({ ...QUEUED, repository: { ...(QUEUED["repository"] as object), full_name: "someone/else" } });
  const rejected = await acceptGiteaWebhook(delivery(badRepo), { secrets: [SECRET] });
  assert.deepEqual(rejected, { kind: "rejected", reason: "repository.full_name does not match owner and name", authentic: true });
});
