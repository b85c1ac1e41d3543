// Public entry of the forge part: one interface per runner pool, with GitHub (and Gitea) behind it,
// and each forge's HTTP client beside it (GitHub's: github/index.ts, re-exported whole; Gitea's below).
export * from "./github/index.ts";
export { SetupText, type FinishedJobFacts, type ForgeRunner, type JobState, type MintedRunner, type PoolForge, type QueuedJob, type RemoveResult } from "./types.ts";
export { GitHubJitForge, isNameTaken, readJobFacts, type GitHubJitForgeOptions } from "./github/jit-forge.ts";
export { GitHubScaleSetForge, type GitHubScaleSetForgeOptions } from "./github/scale-set-forge.ts";
export { GiteaForge, type GiteaForgeOptions } from "./gitea/gitea-forge.ts";
export { GiteaClient, GiteaErrorCode, DEFAULT_GITEA_RETRY, describeGiteaScope, type GiteaClientOptions, type GiteaJob, type GiteaRun, type GiteaRunner, type GiteaScope, type RegisteredRunner } from "./gitea/client.ts";
export { FORGE_ERROR_CODES } from "./error-codes.ts";
export { acceptGiteaWebhook, GITEA_WEBHOOK_DIALECT } from "./gitea/webhook.ts";
