/**
 * What the cache trust rule reads about a finished GitHub job (src/operator/caches): the job's
 * conclusion and completion, its run's event, branch, repository and head repository — through the
 * real client against the test server, whose replies are held to GitHub's OpenAPI description.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { readJobFacts } from "../../src/forge/index.ts";
import { decidePromotion, DEFAULT_PROMOTION_RULE } from "../../src/operator/index.ts";
import { startGitHub } from "./harness.ts";

const repo = { owner: "acme", repo: "web" };

test("a finished job's facts come from GitHub's job and run; only a successful push to the default branch of the repository itself promotes", async (t) => {
  const { server, client } = await startGitHub(t);
  const github = client();
  const push = server.queueJob({ repo, labels: ["imp"], steps: [] });
  assert.deepEqual(await readJobFacts(github, "acme/web", push.id), { repository: "acme/web", event: "push", branch: "main", defaultBranch: "main", fromFork: false, conclusion: "", completedAt: undefined }, "a queued job has no conclusion yet");
  push.status = "completed";
  push.conclusion = "success";
  push.completedAt = Date.parse("2026-12-07T12:00:00Z");
  const facts = await readJobFacts(github, "acme/web", push.id);
  assert.deepEqual(facts, { repository: "acme/web", event: "push", branch: "main", defaultBranch: "main", fromFork: false, conclusion: "success", completedAt: Date.parse("2026-12-07T12:00:00Z") });
  assert.ok(facts?.completedAt !== undefined);
  assert.deepEqual(decidePromotion({ ...facts, completedAt: facts.completedAt }, DEFAULT_PROMOTION_RULE, { fromJobCompletedAt: undefined }), { promote: true });

  const forked = server.queueJob({ repo, labels: ["imp"], steps: [], trigger: { event: "pull_request", headBranch: "patch-1", headRepository: "mallory/web" } });
  server.cancelJob(forked.id);
  const fromFork = await readJobFacts(github, "acme/web", forked.id);
  assert.deepEqual({ ...fromFork, completedAt: 0 }, { repository: "acme/web", event: "pull_request", branch: "patch-1", defaultBranch: "main", fromFork: true, conclusion: "cancelled", completedAt: 0 });

  const tag = server.queueJob({ repo, labels: ["imp"], steps: [], trigger: { event: "push", headBranch: null } });
  assert.equal((await readJobFacts(github, "acme/web", tag.id))?.branch, undefined, "a tag's run names no branch");
  assert.equal(await readJobFacts(github, "acme/web", 424_242), undefined, "no such job");
  assert.equal(await readJobFacts(github, "acme/other", push.id), undefined, "a job of another repository is not found there");
});
