/**
 * Where a runner is registered. GitHub has three levels with the same runner endpoints under
 * different prefixes; everything Imp does is written once against a scope.
 */
export type GitHubScope =
  | { readonly kind: "repo"; readonly owner: string; readonly repo: string }
  | { readonly kind: "org"; readonly org: string }
  | { readonly kind: "enterprise"; readonly enterprise: string };

/** The REST path prefix of a scope's Actions endpoints, e.g. `/orgs/acme/actions`. */
export function actionsPrefix(scope: GitHubScope): string {
  switch (scope.kind) {
    case "repo":
      return `/repos/${encodeURIComponent(scope.owner)}/${encodeURIComponent(scope.repo)}/actions`;
    case "org":
      return `/orgs/${encodeURIComponent(scope.org)}/actions`;
    case "enterprise":
      return `/enterprises/${encodeURIComponent(scope.enterprise)}/actions`;
  }
}

/** A scope as a person reads it in an error or a log line: `repo acme/web`, `org acme`. */
export function describeScope(scope: GitHubScope): string {
  switch (scope.kind) {
    case "repo":
      return `repo ${scope.owner}/${scope.repo}`;
    case "org":
      return `org ${scope.org}`;
    case "enterprise":
      return `enterprise ${scope.enterprise}`;
  }
}
