export { SetupController, VM_NODE_INDEX, VM_POOL_INDEX, type SetupControllerOptions } from "./setup-controller.ts";
export { InputsController, type InputsControllerOptions } from "./inputs-controller.ts";
