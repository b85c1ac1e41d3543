/**
 * What a pool means on GitHub: its scope (repo, org, enterprise) and which jobs it can take.
 */
import type { ImpVMRunnerPool } from "../../api/index.ts";
import { terminalError } from "../../shared/index.ts";
import type { GitHubScope, WorkflowJobEvent } from "../../github/index.ts";

/** Labels GitHub gives every self-hosted Linux x64 runner itself; jobs may ask for them. */
const IMPLICIT_LABELS = ["self-hosted", "linux", "x64"];

export function scopeOfPool(pool: Readonly<ImpVMRunnerPool>): GitHubScope {
  const gh = pool.spec.github;
  switch (gh.scope) {
    case "repo": {
      const [owner, repo] = (gh.repository ?? "").split("/");
      if (owner === undefined || repo === undefined || owner === "" || repo === "") {
        throw terminalError("PoolSpecInvalid", `Cannot use pool ${pool.metadata.name}: spec.github.repository is not owner/name`);
      }
      return { kind: "repo", owner, repo };
    }
    case "org":
      if (gh.organization === undefined) throw terminalError("PoolSpecInvalid", `Cannot use pool ${pool.metadata.name}: spec.github.organization is missing`);
      return { kind: "org", org: gh.organization };
    case "enterprise":
      if (gh.enterprise === undefined) throw terminalError("PoolSpecInvalid", `Cannot use pool ${pool.metadata.name}: spec.github.enterprise is missing`);
      return { kind: "enterprise", enterprise: gh.enterprise };
  }
}

/**
 * Whether a job could run on this pool's runners: the job comes from the pool's scope and every
 * label it asks for is one the runners carry (GitHub compares labels case-insensitively).
 */
export function poolTakesJob(pool: Readonly<ImpVMRunnerPool>, job: Pick<WorkflowJobEvent, "labels" | "repository" | "organization" | "enterprise">): boolean {
  const gh = pool.spec.github;
  const inScope =
    gh.scope === "repo"
      ? job.repository.fullName.toLowerCase() === (gh.repository ?? "").toLowerCase()
      : gh.scope === "org"
        ? (job.organization ?? job.repository.owner).toLowerCase() === (gh.organization ?? "").toLowerCase()
        : job.enterprise !== undefined && job.enterprise.toLowerCase() === (gh.enterprise ?? "").toLowerCase();
  return inScope && poolCarriesLabels(pool, job.labels);
}

/** Whether the pool's runners carry every label a job asks for (GitHub compares labels case-insensitively). */
export function poolCarriesLabels(pool: Readonly<ImpVMRunnerPool>, labels: readonly string[]): boolean {
  const carried = new Set([...IMPLICIT_LABELS, ...pool.spec.github.labels.map((l) => l.toLowerCase())]);
  return labels.every((l) => carried.has(l.toLowerCase()));
}
