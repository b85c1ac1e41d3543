import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { request } from "node:http";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import type { WorkflowJobEvent } from "../../forge/index.ts";
import { silentLogger } from "../../shared/index.ts";
import { WEBHOOK_PATH, WebhookServer } from "./webhook-server.ts";

const OLD = "old-secret";
const NEW = "new-secret";
const payload = JSON.stringify({
  action: "queued",
  workflow_job: { id: 7, run_id: 8, name: "build", labels: ["imp"] },
  repository: { name: "web", full_name: "acme/web", owner: { login: "acme" } },
});
const sign = (body: string, secret: string): string => `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;

describe("WebhookServer", () => {
  const events: WorkflowJobEvent[] = [];
  const stop = new AbortController();
  let server: WebhookServer;
  let running: Promise<void>;
  let url: string;

  before(async () => {
    server = new WebhookServer({ secrets: [NEW, OLD], onEvent: (_forge, e) => events.push(e), port: 0, host: "127.0.0.1", registry: new Registry(), logger: silentLogger, maxBodyBytes: 4096 });
    running = server.start(stop.signal);
    url = `${await server.listening()}${WEBHOOK_PATH}`;
  });
  after(async () => {
    stop.abort();
    await running;
  });

  const post = async (body: string, headers: Record<string, string>): Promise<number> => {
    const r = await fetch(url, { method: "POST", headers: { "x-github-event": "workflow_job", "x-github-delivery": randomUUID(), ...headers }, body });
    await r.arrayBuffer();
    return r.status;
  };

  it("accepts deliveries signed with either secret while rotating, and hands on the parsed event", async () => {
    assert.equal(await post(payload, { "x-hub-signature-256": sign(payload, NEW) }), 202);
    assert.equal(await post(payload, { "x-hub-signature-256": sign(payload, OLD) }), 202);
    assert.equal(events.length, 2);
    assert.equal(events[0]?.jobId, 7);
    assert.deepEqual(events[0]?.labels, ["imp"]);
  });

  it("refuses a third secret, a tampered body and a missing signature, handing on nothing", async () => {
    const before = events.length;
    assert.equal(await post(payload, { "x-hub-signature-256": sign(payload, "other") }), 401);
    assert.equal(await post(payload.replace("build", "bu1ld"), { "x-hub-signature-256": sign(payload, NEW) }), 401);
    assert.equal(await post(payload, {}), 401);
    assert.equal(events.length, before);
  });

  it("ignores a repeated delivery id and an authentic event it does not act on", async () => {
    const before = events.length;
    const id = randomUUID();
    assert.equal(await post(payload, { "x-hub-signature-256": sign(payload, NEW), "x-github-delivery": id }), 202);
    assert.equal(await post(payload, { "x-hub-signature-256": sign(payload, NEW), "x-github-delivery": id }), 200);
    const ping = JSON.stringify({ zen: "Keep it logically awesome.", hook_id: 1 });
    assert.equal(await post(ping, { "x-hub-signature-256": sign(ping, NEW), "x-github-event": "ping" }), 204);
    const malformed = JSON.stringify({ action: "queued" });
    assert.equal(await post(malformed, { "x-hub-signature-256": sign(malformed, NEW) }), 400);
    assert.equal(events.length, before + 1);
  });

  it("cuts a body over the limit even without Content-Length (chunked), and answers other paths and methods", async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(url, { method: "POST", headers: { "transfer-encoding": "chunked", "x-github-event": "workflow_job" } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      for (let i = 0; i < 8; i++) req.write("x".repeat(1024));
      req.end();
    });
    assert.equal(status, 413);
    assert.equal((await fetch(url)).status, 405);
    assert.equal((await fetch(url.replace(WEBHOOK_PATH, "/"), { method: "POST", body: "{}" })).status, 404);
  });
});
