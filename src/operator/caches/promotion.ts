/**
 * Whether a finished job's cache clone becomes its pool's next cache generation: the trust rule of
 * cache volumes (docs/caches.md), as a pure function of what the forge says about the job, the pool's
 * rule and the pool's current generation.
 *
 * The guest decides nothing: every input here comes from the forge's API, asked by the operator after
 * the job ended (never from the VM, its console or its runner). On any doubt the clone is discarded —
 * a discarded clone costs the next job a cold cache; a promoted poisoned one costs every later job.
 */
import type { FinishedJobFacts } from "../../forge/index.ts";

/** The facts of a finished job (its completion time known), as `PoolForge.jobFacts` reads them. */
export type JobFacts = FinishedJobFacts & { readonly completedAt: number };

/** A pool's rule. `$default` in `branches` stands for the repository's default branch. */
export interface PromotionRule {
  readonly events: readonly string[];
  readonly branches: readonly string[];
  /** Repositories whose jobs may promote; empty = any repository the pool serves. */
  readonly repositories: readonly string[];
}

/** The rule a pool has unless it says otherwise: a successful push to the default branch. */
export const DEFAULT_PROMOTION_RULE: PromotionRule = { events: ["push"], branches: ["$default"], repositories: [] };

/**
 * Events whose runs are started, or whose code is chosen, by someone other than the repository's
 * writers: never trusted, whatever a pool's rule lists (the pool's CEL is to refuse a rule naming
 * one once `spec.cache` exists; until then this check is the only one).
 */
export const UNTRUSTED_EVENTS: readonly string[] = ["pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment", "issue_comment", "fork", "workflow_run"];

export type PromotionDecision =
  | { readonly promote: true }
  | { readonly promote: false; readonly reason: DiscardReason; readonly detail: string };

export type DiscardReason = "FactsUnknown" | "NotSucceeded" | "UntrustedEvent" | "EventNotInRule" | "FromFork" | "BranchNotInRule" | "RepositoryNotInRule" | "Superseded";

/** The pool's current generation: which job's clone it came from, if any. */
export interface CurrentGeneration {
  readonly fromJobCompletedAt: number | undefined;
}

const discard = (reason: DiscardReason, detail: string): PromotionDecision => ({ promote: false, reason, detail });

/**
 * Two trusted jobs that end close together: the one that completed later wins, whichever clone is
 * promoted first — a generation is never replaced by one from a job that completed before the job it
 * came from. The later job ran on an older generation but saw the repository's newer state, which is
 * what the next job builds.
 */
export function decidePromotion(facts: JobFacts | undefined, rule: PromotionRule, current: CurrentGeneration): PromotionDecision {
  if (facts === undefined) return discard("FactsUnknown", "the forge did not say what the job was");
  if (facts.conclusion !== "success") return discard("NotSucceeded", `the job's conclusion is ${facts.conclusion}`);
  if (UNTRUSTED_EVENTS.includes(facts.event)) return discard("UntrustedEvent", `a ${facts.event} run is never trusted`);
  if (facts.fromFork) return discard("FromFork", "the run's code comes from a fork");
  if (!rule.events.includes(facts.event)) return discard("EventNotInRule", `${facts.event} is not among the rule's events (${rule.events.join(", ")})`);
  const branches = rule.branches.map((b) => (b === "$default" ? facts.defaultBranch : b));
  if (facts.branch === undefined || !branches.includes(facts.branch)) return discard("BranchNotInRule", `branch ${facts.branch ?? "(none)"} is not among the rule's branches (${branches.join(", ")})`);
  if (rule.repositories.length > 0 && !rule.repositories.includes(facts.repository)) return discard("RepositoryNotInRule", `${facts.repository} is not among the rule's repositories`);
  if (current.fromJobCompletedAt !== undefined && facts.completedAt <= current.fromJobCompletedAt) {
    return discard("Superseded", `the current generation comes from a job that completed later (${new Date(current.fromJobCompletedAt).toISOString()})`);
  }
  return { promote: true };
}
