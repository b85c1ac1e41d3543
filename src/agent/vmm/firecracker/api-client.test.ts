import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ImpError } from "../../../shared/index.ts";
import { FirecrackerApi, parseInstanceInfo } from "./api-client.ts";
import { actionRequest, DESCRIBE_INSTANCE } from "./api-requests.ts";

const dir = mkdtempSync(join(tmpdir(), "imp-fc-api-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let seq = 0;

/** An HTTP server on a Unix socket standing in for Firecracker's API; records what it was sent. */
async function fakeApi(handler: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<{ server: Server; path: string; seen: string[] }> {
  const path = join(dir, `api${++seq}.sock`);
  const seen: string[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      seen.push(`${req.method} ${req.url} ${req.headers["content-type"] ?? "-"} ${body}`);
      handler(req, body, res);
    });
  });
  server.listen(path);
  await once(server, "listening");
  return { server, path, seen };
}

const isCode = (code: string, errorClass: string) => (err: unknown): boolean =>
  err instanceof ImpError && err.code === code && err.errorClass === errorClass;

describe("FirecrackerApi", () => {
  it("sends a JSON body and accepts 204", async () => {
    const fake = await fakeApi((_req, _body, res) => res.writeHead(204).end());
    await new FirecrackerApi(fake.path, { vm: "vm1", timeoutMs: 2_000 }).put(actionRequest("InstanceStart"));
    assert.deepEqual(fake.seen, ['PUT /actions application/json {"action_type":"InstanceStart"}']);
    fake.server.close();
  });

  it("turns a 400 into a classified error carrying fault_message", async () => {
    const fake = await fakeApi((_req, _body, res) => res.writeHead(400, { "Content-Type": "application/json" }).end('{"fault_message":"The kernel file cannot be opened"}'));
    await assert.rejects(new FirecrackerApi(fake.path, { vm: "vm1", timeoutMs: 2_000 }).put(actionRequest("InstanceStart")), (err: unknown) => {
      assert.ok(isCode("FirecrackerApiError", "terminal")(err));
      assert.match((err as Error).message, /answered 400: The kernel file cannot be opened$/);
      return true;
    });
    fake.server.close();
  });

  it("gives up after its timeout with a retryable FirecrackerApiTimeout", async () => {
    const fake = await fakeApi(() => undefined); // never answers
    await assert.rejects(new FirecrackerApi(fake.path, { vm: "vm1", timeoutMs: 150 }).send(DESCRIBE_INSTANCE), isCode("FirecrackerApiTimeout", "retryable"));
    fake.server.closeAllConnections();
    fake.server.close();
  });

  it("calls a missing socket retryable (FirecrackerApiUnreachable)", async () => {
    await assert.rejects(new FirecrackerApi(join(dir, "absent.sock"), { vm: "vm1", timeoutMs: 1_000 }).send(DESCRIBE_INSTANCE), isCode("FirecrackerApiUnreachable", "retryable"));
  });

  it("refuses an oversized answer", async () => {
    const fake = await fakeApi((_req, _body, res) => res.writeHead(200).end("x".repeat(200 * 1024)));
    await assert.rejects(new FirecrackerApi(fake.path, { vm: "vm1", timeoutMs: 2_000 }).send(DESCRIBE_INSTANCE), isCode("FirecrackerApiError", "terminal"));
    fake.server.close();
  });

  it("rejects with the signal's reason when aborted", async () => {
    const fake = await fakeApi(() => undefined);
    const controller = new AbortController();
    const sending = new FirecrackerApi(fake.path, { vm: "vm1", timeoutMs: 5_000 }).send(DESCRIBE_INSTANCE, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error("stop now")), 30);
    await assert.rejects(sending, /stop now/);
    fake.server.closeAllConnections();
    fake.server.close();
  });

  it("reads InstanceInfo and refuses an answer that is not one", async () => {
    const fake = await fakeApi((_req, _body, res) => res.writeHead(200).end('{"id":"a","state":"Running","vmm_version":"1.12.1","app_name":"Firecracker"}'));
    assert.equal((await new FirecrackerApi(fake.path, { vm: "vm1", timeoutMs: 2_000 }).describeInstance()).state, "Running");
    fake.server.close();
    assert.equal(parseInstanceInfo('{"id":"a","state":"Exploded","vmm_version":"1","app_name":"x"}'), undefined);
    assert.equal(parseInstanceInfo("not json"), undefined);
  });
});
