import { test } from "node:test";
import assert from "node:assert/strict";
import { GitHubErrorCode, type GitHubScope } from "../../src/forge/index.ts";
import { ImpError } from "../../src/shared/index.ts";
import { startGitHub } from "./harness.ts";

// The validator must catch mistakes on both sides, or "no violations" proves nothing.

const ORG: GitHubScope = { kind: "org", org: "acme" };

async function tokenFor(url: string, github: { listRunners(scope: GitHubScope): Promise<unknown> }, server: { tokens: Map<string, unknown> }): Promise<string> {
  await github.listRunners(ORG);
  const token = [...server.tokens.keys()][0];
  assert.ok(token !== undefined, `a token from ${url}`);
  return token;
}

test("a request off GitHub's schema is recorded as a violation (and refused)", async (t) => {
  const { server, client } = await startGitHub(t, { checkViolations: false });
  const token = await tokenFor(server.url, client(), server);
  const post = (path: string, body: unknown): Promise<Response> =>
    fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `token ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  // labels needs at least one item; runner_group_id is an integer.
  assert.equal((await post("/orgs/acme/actions/runners/generate-jitconfig", { name: "x", runner_group_id: 1, labels: [] })).status, 422);
  assert.equal((await post("/orgs/acme/actions/runners/generate-jitconfig", { name: "x", runner_group_id: "1", labels: ["a"] })).status, 422);
  assert.equal((await post("/orgs/acme/actions/runners/generate-jitconfig", { runner_group_id: 1, labels: ["a"] })).status, 422);
  const list = await fetch(`${server.url}/orgs/acme/actions/runners?per_page=ten&colour=blue`, { headers: { authorization: `token ${token}` } });
  await list.arrayBuffer();
  const unknown = await fetch(`${server.url}/orgs/acme/actions/runner-groups/1/runners`, { headers: { authorization: `token ${token}` } });
  await unknown.arrayBuffer();
  const problems = server.violations.map((v) => `${v.direction} ${v.operationId ?? "-"}: ${v.problem}`);
  assert.deepEqual(problems, [
    "request actions/generate-runner-jitconfig-for-org: request body: /labels must NOT have fewer than 1 items {\"limit\":1}",
    "request actions/generate-runner-jitconfig-for-org: request body: /runner_group_id must be integer {\"type\":\"integer\"}",
    "request actions/generate-runner-jitconfig-for-org: request body: (root) must have required property 'name' {\"missingProperty\":\"name\"}",
    'request actions/list-self-hosted-runners-for-org: query parameter "colour" is not declared',
    'request actions/list-self-hosted-runners-for-org: query parameter "per_page"="ten" is not an integer',
    // 422 is not documented for the list operation: the refusal itself is reported too.
    "response actions/list-self-hosted-runners-for-org: status 422 is not documented for actions/list-self-hosted-runners-for-org",
    "request -: no operation of the contract matches this request",
  ]);
  assert.equal(server.runners.size, 0, "nothing was created from an invalid request");
});

test("a response off GitHub's schema is recorded as a violation", async (t) => {
  const { server, client } = await startGitHub(t, { checkViolations: false });
  const github = client();
  await github.listRunners(ORG);
  // Drop a required field from the generated runner, as a buggy server (or a future GitHub) might.
  server.tamperWithNextResponse((reply) => {
    const body = reply.body as { runner: Record<string, unknown> };
    delete body.runner["busy"];
    return reply;
  });
  await assert.rejects(github.generateJitConfig(ORG, { name: "imp-1", runnerGroupId: 1, labels: ["imp"] }), (err: unknown) => err instanceof ImpError && err.code === GitHubErrorCode.UnexpectedResponse);
  server.tamperWithNextResponse(() => ({ status: 200, body: { runners: [] } }));
  await assert.rejects(github.listRunners(ORG));
  server.tamperWithNextResponse(() => ({ status: 418, body: { message: "teapot" } }));
  await assert.rejects(github.deleteRunner(ORG, 1));
  server.tamperWithNextResponse(() => ({ status: 204, body: { deleted: true } }));
  await github.deleteRunner(ORG, 1);
  assert.deepEqual(
    server.violations.map((v) => `${v.direction} ${v.operationId ?? "-"}: ${v.problem}`),
    [
      "response actions/generate-runner-jitconfig-for-org: response 201 body: /runner must have required property 'busy' {\"missingProperty\":\"busy\"}",
      "response actions/list-self-hosted-runners-for-org: response 200 body: (root) must have required property 'total_count' {\"missingProperty\":\"total_count\"}",
      "response actions/delete-self-hosted-runner-from-org: status 418 is not documented for actions/delete-self-hosted-runner-from-org",
      "response actions/delete-self-hosted-runner-from-org: status 204 is documented without a body, one was sent",
    ],
  );
});

test("what the adapter sends passes the contract, including its errors' bodies", async (t) => {
  // startGitHub's after-hook fails this test on any violation; here a busy delete and a 404 run too.
  const { server, client } = await startGitHub(t);
  const github = client();
  const jit = await github.generateJitConfig(ORG, { name: "imp-ok", runnerGroupId: 1, labels: ["imp"] });
  server.setRunnerState(jit.runnerId, { busy: true });
  assert.equal(await github.deleteRunner(ORG, jit.runnerId), "busy");
  assert.equal(await github.getRunner(ORG, 12345), undefined);
  assert.ok(server.requests.length >= 4);
});

test("webhook payloads are held to the documented workflow_job shape", async (t) => {
  const { server } = await startGitHub(t);
  const job = server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [] });
  assert.equal(job.status, "queued");
  assert.deepEqual(server.violations, [], "the server's own queued payload is valid");
  const problems = server.contract.checkWebhook("queued", { action: "queued", workflow_job: { id: "1" }, sender: {} });
  assert.ok(problems.length === 1 && /must have required property 'repository'/.test(problems[0] ?? ""), problems.join("\n"));
  assert.match(server.contract.checkWebhook("completed", { action: "queued" }).join(), /must be equal to one of the allowed values|required property/);
});

test("the listing of queued jobs (null conclusions included) passes, and a conclusion off the enum does not", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client();
  const job = server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [] });
  const queued = await github.listQueuedJobs({ owner: "acme", repo: "web" });
  assert.deepEqual(queued.map((j) => j.id), [job.id]);
  assert.equal((await github.getWorkflowJob({ owner: "acme", repo: "web" }, job.id))?.status, "queued");
  assert.deepEqual(server.violations, [], "a queued job's conclusion is null, which the description means to allow");
  server.tamperWithNextResponse((reply) => ({ ...reply, body: { ...(reply.body as object), conclusion: "exploded" } }));
  await github.getWorkflowJob({ owner: "acme", repo: "web" }, job.id).catch(() => undefined);
  assert.equal(server.violations.length, 1, "a conclusion outside the enum is still a violation");
  server.violations.length = 0;
});
