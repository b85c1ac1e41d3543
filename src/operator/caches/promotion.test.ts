import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DEFAULT_PROMOTION_RULE, decidePromotion, type CurrentGeneration, type JobFacts, type PromotionRule } from "./index.ts";

const T = Date.parse("2026-12-07T12:00:00Z");
const push: JobFacts = { repository: "acme/app", event: "push", branch: "main", defaultBranch: "main", fromFork: false, conclusion: "success", completedAt: T };
const none: CurrentGeneration = { fromJobCompletedAt: undefined };
const reason = (facts: JobFacts | undefined, rule: PromotionRule = DEFAULT_PROMOTION_RULE, current = none): string => {
  const d = decidePromotion(facts, rule, current);
  return d.promote ? "promote" : d.reason;
};

describe("decidePromotion: which finished job's clone becomes the pool's next cache generation", () => {
  it("promotes a successful push to the default branch under the default rule", () => {
    assert.equal(reason(push), "promote");
  });

  it("discards on any doubt or failure: facts unknown, not a success", () => {
    assert.equal(reason(undefined), "FactsUnknown");
    for (const conclusion of ["failure", "cancelled", "skipped", "timed_out", ""]) assert.equal(reason({ ...push, conclusion }), "NotSucceeded", conclusion);
  });

  it("never trusts a pull request's run or a fork's code, even where a rule lists the event", () => {
    const permissive: PromotionRule = { events: ["push", "pull_request", "pull_request_target", "workflow_run"], branches: ["$default"], repositories: [] };
    for (const event of ["pull_request", "pull_request_target", "workflow_run", "issue_comment"]) assert.equal(reason({ ...push, event }, permissive), "UntrustedEvent", event);
    assert.equal(reason({ ...push, fromFork: true }, permissive), "FromFork");
  });

  it("takes only the rule's events, branches ($default = the repository's default branch now) and repositories", () => {
    assert.equal(reason({ ...push, event: "schedule" }), "EventNotInRule");
    assert.equal(reason({ ...push, event: "schedule" }, { ...DEFAULT_PROMOTION_RULE, events: ["push", "schedule"] }), "promote");
    assert.equal(reason({ ...push, branch: "feature" }), "BranchNotInRule");
    assert.equal(reason({ ...push, branch: undefined }), "BranchNotInRule", "a tag or an unknown ref");
    assert.equal(reason({ ...push, branch: "main", defaultBranch: "trunk" }), "BranchNotInRule", "the default branch moved");
    assert.equal(reason({ ...push, branch: "release" }, { ...DEFAULT_PROMOTION_RULE, branches: ["$default", "release"] }), "promote");
    assert.equal(reason(push, { ...DEFAULT_PROMOTION_RULE, repositories: ["acme/other"] }), "RepositoryNotInRule");
    assert.equal(reason(push, { ...DEFAULT_PROMOTION_RULE, repositories: ["acme/app"] }), "promote");
  });

  it("two trusted jobs ending together: the one that completed later wins, in whichever order they are decided", () => {
    const earlier = { ...push, completedAt: T };
    const later = { ...push, completedAt: T + 1_000 };
    assert.equal(reason(later, DEFAULT_PROMOTION_RULE, { fromJobCompletedAt: earlier.completedAt }), "promote");
    assert.equal(reason(earlier, DEFAULT_PROMOTION_RULE, { fromJobCompletedAt: later.completedAt }), "Superseded");
    assert.equal(reason(earlier, DEFAULT_PROMOTION_RULE, { fromJobCompletedAt: earlier.completedAt }), "Superseded", "the same job twice promotes once");
  });
});
