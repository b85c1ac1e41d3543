import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import type { TestContext } from "node:test";
import { GitHubClient, type GitHubClientOptions } from "../../src/github/index.ts";
import { GitHubTestServer } from "./server.ts";

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
export async function startGitHub(t: TestContext, options: { tokenTtlSeconds?: number; checkViolations?: boolean; apiPrefix?: string } = {}): Promise<GitHubFixture> {
  const keys = appKeyPair();
  const server = await new GitHubTestServer({
    appId: APP_ID,
    installationId: INSTALLATION_ID,
    appPublicKey: keys.publicKey,
    ...(options.tokenTtlSeconds === undefined ? {} : { tokenTtlSeconds: options.tokenTtlSeconds }),
    ...(options.apiPrefix === undefined ? {} : { apiPrefix: options.apiPrefix }),
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
