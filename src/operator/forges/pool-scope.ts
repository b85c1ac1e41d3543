/**
 * What a pool means on its forge: its scope (GitHub: repo, org, enterprise; Gitea: repo, org) and
 * which jobs it can take.
 */
import type { GitHubSettings, ImpVMRunnerPool } from "../../api/index.ts";
import { terminalError } from "../../shared/index.ts";
import type { GitHubScope, WorkflowJobEvent } from "../../forge/index.ts";

/** Labels GitHub gives every self-hosted Linux x64 runner itself; jobs may ask for them. */
const IMPLICIT_LABELS = ["self-hosted", "linux", "x64"];

/** The pool's GitHub settings; a terminal PoolSpecInvalid for a pool of another forge. */
export function githubOf(pool: Readonly<ImpVMRunnerPool>): GitHubSettings {
  const gh = pool.spec.github;
  if (gh === undefined) throw terminalError("PoolSpecInvalid", `Cannot use pool ${pool.metadata.name} as a GitHub pool: it has no spec.github`);
  return gh;
}

/** The pool's runner labels, whatever its forge. */
export function poolLabels(pool: Readonly<ImpVMRunnerPool>): readonly string[] {
  return pool.spec.github?.labels ?? pool.spec.gitea?.labels ?? [];
}

/** `owner/name` of the pool's repository, or its organization, or (GitHub enterprise scope) its enterprise: what metrics and Events name. */
export function poolOwner(pool: Readonly<ImpVMRunnerPool>): { readonly organization: string; readonly repository: string; readonly enterprise: string } {
  const f = pool.spec.github ?? pool.spec.gitea;
  const [owner = "", repo = ""] = f?.repository?.split("/") ?? [];
  return { organization: f?.organization ?? owner, repository: repo, enterprise: pool.spec.github?.scope === "enterprise" ? (pool.spec.github.enterprise ?? "") : "" };
}

/**
 * Where a listing of the jobs waiting for the pool looks, when its forge lists per repository
 * (GitHub): the pool's repository (repository scope), the repositories it heard of recently
 * (organization scope; GitHub has no organization-wide listing), none (enterprise scope, or a
 * forge that lists its whole scope at once).
 */
export function listedRepositories(pool: Readonly<ImpVMRunnerPool>, recentlyHeard: () => string[]): string[] {
  const gh = pool.spec.github;
  if (gh === undefined) return [];
  return gh.scope === "repo" ? [gh.repository ?? ""] : gh.scope === "org" ? recentlyHeard() : [];
}

export function scopeOfPool(pool: Readonly<ImpVMRunnerPool>): GitHubScope {
  const gh = githubOf(pool);
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
  const gt = pool.spec.gitea;
  if (gt !== undefined) {
    const inGiteaScope = gt.scope === "repo" ? job.repository.fullName.toLowerCase() === (gt.repository ?? "").toLowerCase() : job.repository.owner.toLowerCase() === (gt.organization ?? "").toLowerCase();
    return inGiteaScope && poolCarriesLabels(pool, job.labels);
  }
  const gh = githubOf(pool);
  const inScope =
    gh.scope === "repo"
      ? job.repository.fullName.toLowerCase() === (gh.repository ?? "").toLowerCase()
      : gh.scope === "org"
        ? (job.organization ?? job.repository.owner).toLowerCase() === (gh.organization ?? "").toLowerCase()
        : job.enterprise !== undefined && job.enterprise.toLowerCase() === (gh.enterprise ?? "").toLowerCase();
  return inScope && poolCarriesLabels(pool, job.labels);
}

/**
 * Whether the pool's runners carry every label a job asks for (GitHub compares labels
 * case-insensitively and gives every self-hosted runner its implicit ones; Gitea matches the
 * runner's own labels only).
 */
export function poolCarriesLabels(pool: Readonly<ImpVMRunnerPool>, labels: readonly string[]): boolean {
  const carried = new Set([...(pool.spec.github === undefined ? [] : IMPLICIT_LABELS), ...poolLabels(pool).map((l) => l.toLowerCase())]);
  return labels.every((l) => carried.has(l.toLowerCase()));
}

/** Which forge a pool's runners serve. Job ids and webhook secrets are each forge's own: demand never mixes them. */
export type ForgeFamily = "github" | "gitea";

export function forgeOf(pool: { readonly spec: { readonly gitea?: unknown } }): ForgeFamily {
  return pool.spec.gitea === undefined ? "github" : "gitea";
}

/** The forge's name as a person reads it, for conditions, Events and logs. */
export function forgeName(pool: { readonly spec: { readonly gitea?: unknown } }): string {
  return forgeOf(pool) === "gitea" ? "Gitea" : "GitHub";
}

/**
 * The credential whose writes the forge paces, as the spec names it (`namespace/secret`): a GitHub
 * pool minting JIT runners through the REST API, whose App installation GitHub lets write once a
 * second (docs/github.md). Undefined where no pacing applies: scale-set pools mint through the
 * Actions service, Gitea paces nothing. Pools sharing a Secret share the installation, and its pace.
 */
export function pacedCredentialOf(pool: Readonly<Pick<ImpVMRunnerPool, "metadata" | "spec">>): string | undefined {
  const gh = pool.spec.github;
  if (gh === undefined || gh.scaleSet !== undefined) return undefined;
  return `${pool.metadata.namespace ?? ""}/${gh.credentialsSecretRef.name}`;
}
