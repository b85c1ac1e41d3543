import type { GitHubScope } from "../scope.ts";

/**
 * The scope's web URL, as `POST /actions/runner-registration` wants it (`url`): what a person would
 * open in a browser, derived from the REST base. github.com's API lives on `api.github.com` (and a
 * GHE.com tenant's on `api.<tenant>.ghe.com`); a GitHub Enterprise Server's under `/api/v3`; any
 * other base (a test server) is its own web host.
 */
export function configUrlOf(apiBaseUrl: string, scope: GitHubScope): string {
  const base = new URL(apiBaseUrl);
  let origin: string;
  if (base.hostname === "api.github.com" || /^api\.[^.]+\.ghe\.com$/.test(base.hostname)) {
    origin = `${base.protocol}//${base.host.replace(/^api\./, "")}`;
  } else {
    const path = base.pathname.replace(/\/+$/, "").replace(/\/api\/v3$/, "");
    origin = `${base.protocol}//${base.host}${path}`;
  }
  const tail = scope.kind === "repo" ? `${scope.owner}/${scope.repo}` : scope.kind === "org" ? scope.org : `enterprises/${scope.enterprise}`;
  return `${origin}/${tail}`;
}

/** Where `POST /actions/runner-registration` goes: on the REST base (GHES: under /api/v3). */
export function runnerRegistrationUrlOf(apiBaseUrl: string): string {
  return `${apiBaseUrl.replace(/\/+$/, "")}/actions/runner-registration`;
}
