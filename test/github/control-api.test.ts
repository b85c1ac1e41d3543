import { test } from "node:test";
import assert from "node:assert/strict";
import type { GitHubScope } from "../../src/forge/index.ts";
import { startGitHub } from "./harness.ts";

// The test-control endpoints drive the same state as the server's methods, for tests that run the
// server in another process.

const ORG: GitHubScope = { kind: "org", org: "acme" };

test("jobs, runner state, faults and token expiry can be driven over HTTP", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client({ serverErrorRetries: 0 });
  const control = async (path: string, body: unknown, method = "POST"): Promise<Response> => {
    const response = await fetch(`${server.url}/_imp-test/control${path}`, { method, headers: { "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return response;
  };

  const jit = await github.generateJitConfig(ORG, { name: "imp-c", runnerGroupId: 1, labels: ["imp"] });
  assert.equal((await control(`/runners/${jit.runnerId}`, { status: "online", busy: true })).status, 204);
  assert.deepEqual(await github.getRunner(ORG, jit.runnerId).then((r) => [r?.status, r?.busy]), ["online", true]);

  const queued = (await (await control("/jobs", { repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [{ name: "a", run: "true" }] })).json()) as { id: number };
  const job = (await (await control(`/jobs/${queued.id}`, undefined, "GET")).json()) as { status: string; labels: string[] };
  assert.deepEqual([job.status, job.labels], ["queued", ["imp"]]);

  assert.equal((await control("/faults", { kind: "server-error", status: 503, count: 1, path: "/actions/runners$" })).status, 204);
  await assert.rejects(github.listRunners(ORG), /GitHub answered 503/);
  assert.equal((await github.listRunners(ORG)).length, 1, "the fault was used up");

  assert.equal((await control("/tokens/expire", {})).status, 204);
  const before = server.requestsTo(/access_tokens$/).length;
  await github.listRunners(ORG);
  assert.equal(server.requestsTo(/access_tokens$/).length, before + 1, "an expired token was replaced");
});
