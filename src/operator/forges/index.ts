// The forges as the operator's parts see them: each pool's client (credentials, tokens) and what a pool means on its forge.
export { PoolForges, TOKEN_SECRET_KEY, type PoolForgesOptions, type PoolGitHub } from "./pool-forges.ts";
export { forgeName, forgeOf, githubOf, listedRepositories, pacedCredentialOf, poolCarriesLabels, poolLabels, poolOwner, poolTakesJob, scopeOfPool, type ForgeFamily } from "./pool-scope.ts";
