import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { acceptWebhook, DeliveryDeduplicator, readWebhookBody, type WebhookVerdict } from "../../src/forge/index.ts";
import { systemClock } from "../../src/shared/index.ts";
import { startGitHub } from "./harness.ts";

/** A webhook endpoint as the operator will run it: verify, parse, deduplicate, answer. */
async function receiver(t: TestContext, secrets: string[], maxBodyBytes = 1024 * 1024): Promise<{ url: string; verdicts: Array<WebhookVerdict & { duplicate: boolean }> }> {
  const verdicts: Array<WebhookVerdict & { duplicate: boolean }> = [];
  const dedup = new DeliveryDeduplicator(systemClock);
  const server = createServer((req, res) => {
    void (async () => {
      const read = await readWebhookBody(req, req.headers["content-length"], maxBodyBytes);
      if (!read.ok) {
        verdicts.push({ kind: "rejected", reason: read.reason, authentic: false, duplicate: false });
        res.writeHead(413, { connection: "close" }).end();
        return;
      }
      const verdict = await acceptWebhook({ headers: req.headers, body: read.body }, { secrets, maxBodyBytes });
      const duplicate = verdict.kind === "accepted" && !dedup.firstDelivery(verdict.event.deliveryId);
      verdicts.push({ ...verdict, duplicate });
      res.writeHead(verdict.kind === "accepted" ? 202 : verdict.authentic ? 422 : 401).end();
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhook`, verdicts };
}

const JOB = { repo: { owner: "acme", repo: "web" }, labels: ["self-hosted", "imp"], steps: [{ name: "hi", run: "echo hi" }] };

test("workflow_job webhooks signed by the test server are accepted, during rotation with either secret", async (t) => {
  const { server } = await startGitHub(t);
  const hook = await receiver(t, ["old-secret", "new-secret"]);
  server.webhooks.target = { url: hook.url, secret: "old-secret" };
  const first = server.queueJob(JOB);
  await server.webhooks.settled();
  server.webhooks.target = { url: hook.url, secret: "new-secret" };
  server.queueJob(JOB);
  await server.webhooks.settled();
  assert.deepEqual(hook.verdicts.map((v) => v.kind), ["accepted", "accepted"]);
  const event = hook.verdicts[0]?.kind === "accepted" ? hook.verdicts[0].event : undefined;
  assert.equal(event?.jobId, first.id);
  assert.equal(event?.action, "queued");
  assert.deepEqual(event?.labels, ["self-hosted", "imp"]);
  assert.deepEqual(server.webhooks.sent.map((s) => s.status), [202, 202]);
});

test("a webhook signed with a secret we do not hold is rejected", async (t) => {
  const { server } = await startGitHub(t);
  const hook = await receiver(t, ["right"]);
  server.webhooks.target = { url: hook.url, secret: "forged" };
  server.queueJob(JOB);
  await server.webhooks.settled();
  assert.deepEqual(hook.verdicts.map((v) => v.kind === "rejected" && v.reason), ["signature does not match any configured secret"]);
  assert.deepEqual(server.webhooks.sent.map((s) => s.status), [401]);
});

test("duplicated deliveries are detected by delivery id; dropped ones never arrive", async (t) => {
  const { server } = await startGitHub(t);
  const hook = await receiver(t, ["s"]);
  server.webhooks.target = { url: hook.url, secret: "s" };
  server.webhooks.duplicateNext = 1;
  server.queueJob(JOB);
  server.webhooks.dropNext = 1;
  server.queueJob(JOB);
  server.queueJob(JOB);
  await server.webhooks.settled();
  assert.deepEqual(hook.verdicts.map((v) => [v.kind, v.duplicate]), [["accepted", false], ["accepted", true], ["accepted", false]]);
  const dropped = server.webhooks.sent.filter((s) => s.status === "dropped");
  assert.equal(dropped.length, 1);
  assert.equal(server.webhooks.sent.filter((s) => s.status === 202).length, 3);
  const received = hook.verdicts.map((v) => (v.kind === "accepted" ? v.event.deliveryId : ""));
  assert.ok(!received.includes(dropped[0]?.deliveryId ?? ""), "the dropped delivery never arrived");
});

test("an oversize delivery is refused by size before its signature is checked", async (t) => {
  const { server } = await startGitHub(t);
  const hook = await receiver(t, ["s"], 200);
  server.webhooks.target = { url: hook.url, secret: "s" };
  server.queueJob(JOB);
  await server.webhooks.settled();
  assert.equal(hook.verdicts.length, 1);
  assert.match(hook.verdicts[0]?.kind === "rejected" ? hook.verdicts[0].reason : "", /exceeds the limit of 200/);
  assert.deepEqual(server.webhooks.sent.map((s) => s.status), [413]);
});
