import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestContext } from "node:test";
import { acceptWebhook, GitHubClient, readWebhookBody, type GitHubClientOptions, type WorkflowJobEvent } from "../../src/forge/index.ts";
import { GitHubTestServer } from "./server.ts";
import type { ActionsServiceOptions } from "./actions-service.ts";

/** GitHub issues App keys as PKCS#1 PEM; so do we. */
export function appKeyPair(): { privateKey: string; publicKey: string } {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    privateKeyEncoding: { type: "pkcs1", format: "pem" },
    publicKeyEncoding: { type: "spki", format: "pem" },
  });
  return { privateKey, publicKey };
}

export const APP_ID = 4242;
export const INSTALLATION_ID = 777;

export interface GitHubFixture {
  readonly server: GitHubTestServer;
  readonly privateKey: string;
  /** A client for the installation; `overrides` for retry counts, timeouts, keys. */
  client(overrides?: Partial<GitHubClientOptions>): GitHubClient;
}

/** Starts a test server for one test; stops it afterwards and fails the test on any OpenAPI violation. */
export async function startGitHub(t: TestContext, options: { tokenTtlSeconds?: number; checkViolations?: boolean; apiPrefix?: string; jobLockTimeoutMs?: number; actionsService?: Partial<ActionsServiceOptions> } = {}): Promise<GitHubFixture> {
  const keys = appKeyPair();
  const server = await new GitHubTestServer({
    appId: APP_ID,
    installationId: INSTALLATION_ID,
    appPublicKey: keys.publicKey,
    ...(options.tokenTtlSeconds === undefined ? {} : { tokenTtlSeconds: options.tokenTtlSeconds }),
    ...(options.apiPrefix === undefined ? {} : { apiPrefix: options.apiPrefix }),
    ...(options.jobLockTimeoutMs === undefined ? {} : { jobLockTimeoutMs: options.jobLockTimeoutMs }),
    ...(options.actionsService === undefined ? {} : { actionsService: options.actionsService }),
  }).start();
  t.after(async () => {
    await server.stop();
    if (options.checkViolations ?? true) assertNoViolations(server);
  });
  return {
    server,
    privateKey: keys.privateKey,
    client: (overrides = {}) =>
      new GitHubClient({
        baseUrl: `${server.url}${options.apiPrefix ?? ""}`,
        credentials: { appId: APP_ID, installationId: INSTALLATION_ID, privateKey: keys.privateKey },
        serverErrorBackoffMs: 50,
        ...overrides,
      }),
  };
}

export function assertNoViolations(server: GitHubTestServer): void {
  assert.deepEqual(server.violations, [], "the GitHub test server saw requests or sent responses that break GitHub's OpenAPI description");
}

/**
 * Points the server's webhooks at a receiver that takes them as the operator does (signature,
 * then parseWorkflowJobWebhook); `events` are the accepted ones, `rejected` the reasons of the rest.
 */
export async function receiveWebhooks(t: TestContext, server: GitHubTestServer): Promise<{ events: WorkflowJobEvent[]; rejected: string[] }> {
  const events: WorkflowJobEvent[] = [];
  const rejected: string[] = [];
  const secret = "receiver-secret";
  const http = createServer((req, res) => {
    void (async () => {
      const read = await readWebhookBody(req, req.headers["content-length"]);
      const verdict = read.ok ? await acceptWebhook({ headers: req.headers, body: read.body }, { secrets: [secret] }) : { kind: "rejected" as const, reason: read.reason };
      if (verdict.kind === "accepted") events.push(verdict.event);
      else rejected.push(verdict.reason);
      res.writeHead(verdict.kind === "accepted" ? 202 : 422).end();
    })();
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => http.close(() => r())));
  server.webhooks.target = { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/webhook`, secret };
  return { events, rejected };
}
