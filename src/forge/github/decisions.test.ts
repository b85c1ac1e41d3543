import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../shared/index.ts";
import { decideRateLimitRetry } from "./rate-limit-decision.ts";
import { InstallationTokenCache, tokenNeedsRefresh } from "./installation-token-cache.ts";
import { classifyGitHubError, GitHubErrorCode } from "./errors.ts";
import { isAppAuthUrl } from "./octokit.ts";

test("rate limits are retried up to the cap and only for waits we can afford", () => {
  const policy = { maxRetries: 2, maxWaitSeconds: 60 };
  assert.equal(decideRateLimitRetry(policy, "secondary", 5, 0).retry, true);
  assert.equal(decideRateLimitRetry(policy, "secondary", 5, 1).retry, true);
  assert.equal(decideRateLimitRetry(policy, "secondary", 5, 2).retry, false);
  assert.equal(decideRateLimitRetry(policy, "primary", 61, 0).retry, false);
  assert.equal(decideRateLimitRetry(policy, "primary", 60, 0).retry, true);
});

test("a token is refreshed the margin before it expires", () => {
  assert.equal(tokenNeedsRefresh(10_000, 4_999, 5_000), false);
  assert.equal(tokenNeedsRefresh(10_000, 5_000, 5_000), true);
  assert.equal(tokenNeedsRefresh(Number.NaN, 0, 0), true, "an unreadable expiry is treated as expired");
});

test("the token cache drops entries by their own expires_at, not a fixed lifetime", async () => {
  const clock = new FakeClock(Date.parse("2026-01-01T00:00:00Z"));
  const cache = new InstallationTokenCache(clock, 1_000);
  cache.set("1", "ghs_x|2026-01-01T00:00:00.000Z|2026-01-01T00:00:10.000Z|all|actions!|");
  assert.match(cache.get("1"), /^ghs_x\|/);
  await clock.advance(8_999);
  assert.ok(cache.get("1"));
  await clock.advance(1);
  assert.equal(cache.get("1"), undefined);
  assert.equal(cache.size, 0);
});

function requestError(status: number, data: unknown, headers: Record<string, string> = {}): unknown {
  return Object.assign(new Error("x"), {
    status,
    request: { method: "POST", url: "https://api.github.com/orgs/acme/actions/runners/generate-jitconfig?x=1", headers: { authorization: "token ghs_SECRET" } },
    response: { status, headers, data },
  });
}

test("GitHub statuses map to classified errors with actionable context and no token", () => {
  const call = { action: "create a one-time runner setup for", object: "runner r1 in org acme" };
  const cases: Array<[unknown, string, string]> = [
    [requestError(401, { message: "A JSON web token could not be decoded" }), GitHubErrorCode.Unauthorized, "terminal"],
    [requestError(403, { message: "Resource not accessible by integration" }), GitHubErrorCode.Forbidden, "terminal"],
    [requestError(403, { message: "API rate limit exceeded" }, { "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1767225600" }), GitHubErrorCode.RateLimited, "retryable"],
    [requestError(403, { message: "You have exceeded a secondary rate limit" }, { "retry-after": "30" }), GitHubErrorCode.RateLimited, "retryable"],
    [requestError(429, { message: "slow down" }, { "retry-after": "3" }), GitHubErrorCode.RateLimited, "retryable"],
    [requestError(404, { message: "Not Found" }), GitHubErrorCode.NotFound, "terminal"],
    [requestError(409, { message: "Already exists - A runner with the name r1 already exists." }), GitHubErrorCode.Conflict, "conflict"],
    [requestError(422, { message: "Validation Failed" }), GitHubErrorCode.Invalid, "terminal"],
    [requestError(502, "bad gateway"), GitHubErrorCode.Unavailable, "retryable"],
    [Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { status: 500, request: { method: "GET", url: "http://x/y" } }), GitHubErrorCode.Unavailable, "retryable"],
  ];
  for (const [err, code, errorClass] of cases) {
    const imp = classifyGitHubError(err, call);
    assert.equal(imp.code, code, imp.message);
    assert.equal(imp.errorClass, errorClass, imp.message);
    assert.match(imp.message, /^Cannot create a one-time runner setup for runner r1 in org acme: /);
    const everything = JSON.stringify({ m: imp.message, c: imp.context, cause: String(imp.cause) });
    assert.ok(!everything.includes("ghs_SECRET"), everything);
    assert.ok(!everything.includes("x=1"), "query strings stay out");
  }
  const limited = classifyGitHubError(requestError(429, {}, { "retry-after": "3", "x-github-request-id": "ABCD:1" }), call);
  assert.equal(limited.context["retryAfterSeconds"], 3);
  assert.equal(limited.context["githubRequestId"], "ABCD:1");
  assert.equal(limited.context["path"], "/orgs/acme/actions/runners/generate-jitconfig");
});

test("App-JWT routes are told apart from API routes, also below a GitHub Enterprise Server prefix", () => {
  assert.equal(isAppAuthUrl("https://api.github.com/app/installations/1/access_tokens", "https://api.github.com"), true);
  assert.equal(isAppAuthUrl("/app/installations/1/access_tokens", "https://api.github.com"), true);
  assert.equal(isAppAuthUrl("https://ghe.example/api/v3/app/installations/1/access_tokens", "https://ghe.example/api/v3"), true);
  assert.equal(isAppAuthUrl("https://api.github.com/repos/acme/app/actions/runners", "https://api.github.com"), false);
  assert.equal(isAppAuthUrl("https://ghe.example/api/v3/repos/app/app/actions/runners", "https://ghe.example/api/v3"), false);
  assert.equal(isAppAuthUrl(undefined, "https://api.github.com"), false);
});
