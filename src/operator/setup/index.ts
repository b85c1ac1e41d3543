export { SetupController, VM_NODE_INDEX, VM_POOL_INDEX, type SetupControllerOptions } from "./setup-controller.ts";
export { GitHubClients, TOKEN_SECRET_KEY, type GitHubClientsOptions, type PoolGitHub } from "./github-clients.ts";
export { mintRunner, removeRegistrations, runnerIdsNamed, isNameTaken } from "./runner-registration.ts";
