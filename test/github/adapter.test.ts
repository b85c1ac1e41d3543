import { test } from "node:test";
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { ImpError } from "../../src/shared/index.ts";
import { GitHubErrorCode, type GitHubScope } from "../../src/forge/index.ts";
import { decodeJitSetup } from "./jit-setup-format.ts";
import { appKeyPair, startGitHub } from "./harness.ts";
import { scopeKeyOf } from "./server.ts";

const REPO: GitHubScope = { kind: "repo", owner: "acme", repo: "web" };
const ORG: GitHubScope = { kind: "org", org: "acme" };
const ENTERPRISE: GitHubScope = { kind: "enterprise", enterprise: "acme-corp" };

async function rejectsWith(promise: Promise<unknown>, code: string, errorClass: string): Promise<ImpError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof ImpError, String(err));
    assert.equal(err.code, code, err.message);
    assert.equal(err.errorClass, errorClass, err.message);
    return err;
  }
  assert.fail(`expected ${code}`);
}

test("jitconfig for repo, org and enterprise scopes; the runner is listed, read and its setup stays redacted", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client();
  server.acceptPersonalToken("ghp_enterprise_admin");
  const enterprise = client({ credentials: { token: "ghp_enterprise_admin" } });
  const orgGroup = server.addRunnerGroup({ kind: "org", org: "acme" }, "imp-runners");
  const entGroup = server.addRunnerGroup({ kind: "enterprise", enterprise: "acme-corp" }, "Imp Runners");
  assert.equal((await github.findRunnerGroup({ kind: "org", org: "acme" }, "imp-runners"))?.id, orgGroup);
  assert.equal((await enterprise.findRunnerGroup({ kind: "enterprise", enterprise: "acme-corp" }, "imp runners"))?.id, entGroup, "group names compare case-insensitively");
  assert.equal(await github.findRunnerGroup({ kind: "org", org: "acme" }, "missing"), undefined);
  // GitHub does not let App installation tokens manage enterprise runners.
  await rejectsWith(github.listRunners(ENTERPRISE), GitHubErrorCode.Forbidden, "terminal");

  for (const [scope, group, github] of [[REPO, 1, client()], [ORG, orgGroup, client()], [ENTERPRISE, entGroup, enterprise]] as const) {
    const jit = await github.generateJitConfig(scope, { name: `imp-${scope.kind}`, runnerGroupId: group, labels: ["imp", "kvm"], workFolder: "_work" });
    assert.equal(jit.runnerName, `imp-${scope.kind}`);
    assert.ok(!inspect(jit).includes(jit.encodedJitConfig.reveal()), "inspecting the result does not print the setup");
    assert.ok(!JSON.stringify(jit).includes(jit.encodedJitConfig.reveal()));
    const setup = decodeJitSetup(jit.encodedJitConfig.reveal());
    assert.equal(setup.runner.AgentId, jit.runnerId);
    assert.equal(setup.runner.AgentName, jit.runnerName);
    assert.equal(server.runners.get(jit.runnerId)?.scopeKey, scopeKeyOf(scope));

    const listed = await github.listRunners(scope);
    assert.deepEqual(listed.map((r) => r.name), [jit.runnerName]);
    const runner = await github.getRunner(scope, jit.runnerId);
    assert.deepEqual(runner?.labels, ["self-hosted", "Linux", "X64", "imp", "kvm"]);
    assert.equal(runner?.status, "offline");
    assert.equal(runner?.busy, false);
    assert.equal(runner?.runnerGroupId, group);
  }
  assert.equal(await github.getRunner(ORG, 999_999), undefined, "an unknown runner is undefined, not an error");
  // One runner name per scope: a second jitconfig with the same name is a conflict, not a new runner.
  await rejectsWith(github.generateJitConfig(ORG, { name: "imp-org", runnerGroupId: orgGroup, labels: ["imp"] }), GitHubErrorCode.Conflict, "conflict");
  await rejectsWith(github.generateJitConfig(ORG, { name: "imp-x", runnerGroupId: 31337, labels: ["imp"] }), GitHubErrorCode.NotFound, "terminal");
  const before = server.requests.length;
  await rejectsWith(github.generateJitConfig(ORG, { name: "imp-y", runnerGroupId: 1, labels: [] }), GitHubErrorCode.Invalid, "terminal");
  await rejectsWith(github.generateJitConfig(ORG, { name: "imp-y", runnerGroupId: 1, labels: Array.from({ length: 101 }, (_, i) => `l${i}`) }), GitHubErrorCode.Invalid, "terminal");
  assert.equal(server.requests.length, before, "refused before any request");
});

test("listRunners reads every page and filters by name", async (t) => {
  const { server, client } = await startGitHub(t);
  for (let i = 0; i < 230; i++) server.registerRunner(scopeKeyOf(ORG), { name: `r-${i}`, runner_group_id: 1, labels: ["imp"] });
  const github = client();
  const all = await github.listRunners(ORG);
  assert.equal(all.length, 230);
  assert.equal(new Set(all.map((r) => r.id)).size, 230);
  assert.equal(server.requestsTo(/\/orgs\/acme\/actions\/runners$/).length, 3, "three pages of 100");
  assert.deepEqual((await github.listRunners(ORG, { name: "r-17" })).map((r) => r.name), ["r-17"]);
  await assert.rejects(client({ maxPages: 2 }).listRunners(ORG), (err: unknown) => err instanceof ImpError && err.code === GitHubErrorCode.UnexpectedResponse);
});

test("deleteRunner: a busy runner is a 'busy' result, an idle one is deleted, a missing one counts as done", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client();
  const jit = await github.generateJitConfig(REPO, { name: "imp-del", runnerGroupId: 1, labels: ["imp"] });
  server.setRunnerState(jit.runnerId, { status: "online", busy: true });
  assert.equal(await github.deleteRunner(REPO, jit.runnerId), "busy");
  assert.ok(server.runners.has(jit.runnerId), "a busy runner stays registered");
  server.setRunnerState(jit.runnerId, { busy: false });
  assert.equal(await github.deleteRunner(REPO, jit.runnerId), "deleted");
  assert.equal(server.runners.has(jit.runnerId), false);
  assert.equal(await github.deleteRunner(REPO, jit.runnerId), "gone");
  assert.deepEqual(server.requestsTo(/\/runners\/\d+$/, "DELETE").map((r) => r.status), [422, 204, 404]);
});

test("installation tokens are cached, and replaced before they expire", async (t) => {
  const { server, client } = await startGitHub(t, { tokenTtlSeconds: 10 });
  const github = client({ tokenRefreshMarginMs: 5_000 });
  await github.listRunners(ORG);
  await github.listRunners(ORG);
  await github.listRunners(ORG);
  assert.equal(server.requestsTo(/access_tokens$/).length, 1, "one token for three calls");
  // Past expiry minus margin, the cached token is not sent again: a fresh one is minted first.
  await new Promise((r) => setTimeout(r, 5_500));
  await github.listRunners(ORG);
  assert.equal(server.requestsTo(/access_tokens$/).length, 2);
  assert.deepEqual(server.requests.filter((r) => r.status === 401), [], "no request ever went out with an expired token");
});

test("a token GitHub stops accepting is replaced once and the call succeeds", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client();
  await github.listRunners(ORG);
  server.expireTokens();
  await new Promise((r) => setTimeout(r, 5_100)); // past auth-app's 5 s replication-delay retry window
  assert.deepEqual(await github.listRunners(ORG), []);
  assert.equal(server.requestsTo(/access_tokens$/).length, 2);
  assert.equal(server.requests.filter((r) => r.status === 401).length, 1);
});

test("a wrong private key is GitHubUnauthorized, terminal, after a bounded number of attempts", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client({ credentials: { appId: 4242, installationId: 777, privateKey: appKeyPair().privateKey } });
  const err = await rejectsWith(github.listRunners(ORG), GitHubErrorCode.Unauthorized, "terminal");
  assert.match(err.message, /^Cannot list runners of org acme: GitHub refused the credentials \(check the App id/);
  assert.equal(err.context["status"], 401);
  assert.ok(server.requestsTo(/access_tokens$/).length <= 2);
  assert.equal(server.requestsTo(/\/actions\//).length, 0, "no API call without a token");
  assert.throws(
    () => client({ credentials: { appId: 1, installationId: 777, privateKey: "not a key" } }),
    (e: unknown) => e instanceof ImpError && e.code === GitHubErrorCode.Unauthorized && e.errorClass === "terminal" && !e.message.includes("not a key"),
  );
  const otherApp = client({ credentials: { appId: 1, installationId: 777, privateKey: appKeyPair().privateKey } });
  await rejectsWith(otherApp.listRunners(ORG), GitHubErrorCode.Unauthorized, "terminal");
});

test("5xx answers are retried; when they persist the error is GitHubUnavailable, retryable", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client({ serverErrorRetries: 3 });
  await github.listRunners(ORG); // token first
  server.injectFault({ kind: "server-error", status: 502, count: 2, path: /\/actions\/runners$/ });
  assert.deepEqual(await github.listRunners(ORG), []);
  assert.deepEqual(server.requestsTo(/\/actions\/runners$/).slice(1).map((r) => r.status), [502, 502, 200]);
  server.injectFault({ kind: "server-error", status: 503, count: 10, path: /\/actions\/runners$/ });
  await rejectsWith(github.listRunners(ORG), GitHubErrorCode.Unavailable, "retryable");
  assert.equal(server.requestsTo(/\/actions\/runners$/).length, 4 + 4, "one attempt and three retries");
});

test("a request slower than the timeout is abandoned and retried", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client({ requestTimeoutMs: 3_000 });
  await github.listRunners(ORG);
  server.injectFault({ kind: "delay", ms: 60_000, count: 1, path: /\/actions\/runners$/ });
  assert.deepEqual(await github.listRunners(ORG), [], "the retry answered within the timeout; the slow first attempt could not have");
  assert.equal(server.faultsLeft, 0, "the slow answer was served");
  assert.equal(server.requestsTo(/\/actions\/runners$/).filter((r) => r.status === 200).length, 2);
});

test("a storm of secondary rate limits slows the writes down and loses none of them", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client();
  server.injectFault({ kind: "secondary-rate-limit", status: 403, retryAfterSeconds: 1, count: 3, path: /generate-jitconfig$/ });
  server.injectFault({ kind: "secondary-rate-limit", status: 429, retryAfterSeconds: 1, count: 2, path: /generate-jitconfig$/ });
  const names = ["imp-a", "imp-b", "imp-c"];
  const results = await Promise.all(names.map((name) => github.generateJitConfig(ORG, { name, runnerGroupId: 1, labels: ["imp"] })));
  assert.deepEqual(results.map((r) => r.runnerName).sort(), names);
  assert.deepEqual([...server.runners.values()].map((r) => r.name).sort(), names, "each runner registered exactly once");
  const calls = server.requestsTo(/generate-jitconfig$/);
  assert.equal(calls.filter((c) => c.faulted).length, 5);
  assert.equal(calls.filter((c) => c.status === 201).length, 3);
  // Retry-After was honoured: no runner's request was repeated sooner than its rate-limited answer asked.
  for (const name of names) {
    const attempts = calls.filter((c) => c.name === name);
    for (let i = 1; i < attempts.length; i++) {
      if (attempts[i - 1]?.faulted === true) assert.ok((attempts[i]?.at ?? 0) - (attempts[i - 1]?.at ?? 0) >= 990, `${name}: attempt ${i + 1} came too soon after a rate limit`);
    }
  }
});

test("a primary rate limit waits for x-ratelimit-reset; one beyond the wait budget fails as GitHubRateLimited", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client({ rateLimit: { maxRetries: 3, maxWaitSeconds: 30 } });
  await github.listRunners(ORG);
  server.injectFault({ kind: "rate-limit", status: 429, resetInSeconds: 1, count: 1, path: /\/actions\/runners$/ });
  assert.deepEqual(await github.listRunners(ORG), []);
  const [limited, retried] = server.requestsTo(/\/actions\/runners$/).slice(1);
  assert.equal(limited?.status, 429);
  assert.equal(retried?.status, 200);
  assert.ok((retried?.at ?? 0) - (limited?.at ?? 0) >= 1_000, "the retry waited for the reset");

  server.injectFault({ kind: "rate-limit", status: 403, resetInSeconds: 3600, count: 1, path: /\/actions\/runners$/ });
  const err = await rejectsWith(github.listRunners(ORG), GitHubErrorCode.RateLimited, "retryable");
  assert.ok(typeof err.context["rateLimitReset"] === "string");
  server.injectFault({ kind: "secondary-rate-limit", retryAfterSeconds: 1, count: 10, path: /\/actions\/runners$/ });
  await rejectsWith(github.listRunners(ORG), GitHubErrorCode.RateLimited, "retryable");
  assert.equal(server.requestsTo(/\/actions\/runners$/).filter((r) => r.faulted).length, 1 + 1 + 4, "secondary limits: one attempt and three retries");
});

test("GitHub Enterprise Server: the API below /api/v3, token refresh included (even for a repository named app)", async (t) => {
  const { server, client } = await startGitHub(t, { apiPrefix: "/api/v3" });
  const github = client();
  const scope: GitHubScope = { kind: "repo", owner: "acme", repo: "app" };
  const jit = await github.generateJitConfig(scope, { name: "imp-ghes", runnerGroupId: 1, labels: ["imp"] });
  assert.equal(decodeJitSetup(jit.encodedJitConfig.reveal()).runner.AgentName, "imp-ghes");
  server.expireTokens();
  await new Promise((r) => setTimeout(r, 5_100)); // past auth-app's own 5 s retry window
  assert.deepEqual((await github.listRunners(scope)).map((r) => r.name), ["imp-ghes"]);
  assert.equal(server.requestsTo(/access_tokens$/).length, 2, "the refused token was replaced");
});
