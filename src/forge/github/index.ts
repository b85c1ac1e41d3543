// GitHub's HTTP client and webhook reader, re-exported whole by src/forge/index.ts (the part's entry); everything else in src/forge/github is internal.
export {
  GitHubClient,
  DEFAULT_GITHUB_BASE_URL,
  DEFAULT_REQUEST_TIMEOUT_MS,
  DEFAULT_MAX_PAGES,
  DEFAULT_RUNNER_GROUP_ID,
  type GitHubClientOptions,
  type JitConfigRequest,
  type JitRunner,
  type DeleteRunnerResult,
  type RunnerGroupScope,
} from "./client.ts";
export type { AppCredentials, TokenCredentials, GitHubCredentials } from "./octokit.ts";
export type { GitHubRunner, GitHubRunnerGroup, GitHubWorkflowJob } from "./response-shapes.ts";
export { actionsPrefix, describeScope, type GitHubScope } from "./scope.ts";
export { RunnerJitConfig } from "./jit-config.ts";
export { GitHubErrorCode, classifyGitHubError } from "./errors.ts";
export { DEFAULT_RATE_LIMIT_POLICY, decideRateLimitRetry, type RateLimitPolicy, type RateLimitDecision } from "./rate-limit-decision.ts";
export { DEFAULT_TOKEN_REFRESH_MARGIN_MS, tokenNeedsRefresh } from "./installation-token-cache.ts";
export { DEFAULT_MAX_WEBHOOK_BYTES, verifyWebhookSignature, type SignatureHeader, type SignatureVerdict } from "./webhook-signature.ts";
export { parseWorkflowJobWebhook, GITHUB_WEBHOOK_DIALECT, WORKFLOW_JOB_ACTIONS, type WebhookDialect, type WorkflowJobEvent, type WorkflowJobAction, type WebhookParseResult } from "./workflow-job-event.ts";
export { acceptWebhook, single as singleHeader, verdictOf, type WebhookDelivery, type WebhookOptions, type WebhookVerdict } from "./webhook.ts";
export { readWebhookBody, type BodyRead } from "./webhook-body.ts";
export { DeliveryDeduplicator, type DeliveryDeduplicatorOptions } from "./delivery-deduplicator.ts";
export { CredentialText } from "./credential-text.ts";
export { ScaleSetClient, DEFAULT_SCALE_SET_RETRY, SCALE_SET_API_VERSION, jwtExpiry, type ScaleSetClientOptions, type RemoveRunnerResult } from "./scaleset/client.ts";
export { ScaleSetErrorCode } from "./scaleset/errors.ts";
export { configUrlOf } from "./scaleset/config-url.ts";
export type { JobMessage, RunnerScaleSet, ScaleSetLabel, ScaleSetMessage, ScaleSetSession, ScaleSetStatistics, ScaleSetJitConfig } from "./scaleset/shapes.ts";
export { GITHUB_ERROR_CODES } from "./error-codes.ts";
