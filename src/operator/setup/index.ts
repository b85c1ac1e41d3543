export { SetupController, VM_NODE_INDEX, VM_POOL_INDEX, type SetupControllerOptions } from "./setup-controller.ts";
export { PoolForges, TOKEN_SECRET_KEY, type PoolForgesOptions, type PoolGitHub } from "./pool-forges.ts";
export { InputsController, type InputsControllerOptions } from "./inputs-controller.ts";
