export { SetupController, VM_NODE_INDEX, VM_POOL_INDEX, type SetupControllerOptions, type SetupFaults } from "./setup-controller.ts";
export { GitHubClients, type GitHubClientsOptions, type PoolGitHub } from "./github-clients.ts";
export { mintRunner, removeRegistrations, runnerIdsNamed, isNameTaken } from "./runner-registration.ts";
