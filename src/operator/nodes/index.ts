/** Node loss: VMs on nodes whose agent went silent (or whose Node was deleted) become Failed/NodeLost. */
export { NodeLossController, type NodeLossControllerOptions } from "./node-loss-controller.ts";
export { decideNodeLoss, DEFAULT_NODE_LOST_AFTER_MS, type NodeLossInput, type NodeLossDecision } from "./decide-node-loss.ts";
/** Drain: cordoned nodes record their drain, end jobs past their pool's grace, and report drained. */
export { DrainController, type DrainControllerOptions } from "./drain-controller.ts";
export { decideDrain, DEFAULT_DRAIN_GRACE_MS, type DrainInput, type DrainDecision, type DrainAction } from "./decide-drain.ts";
