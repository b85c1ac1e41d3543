/** Node loss: VMs on nodes whose agent went silent (or whose Node was deleted) become Failed/NodeLost. */
export { NodeLossController, type NodeLossControllerOptions } from "./node-loss-controller.ts";
export { decideNodeLoss, DEFAULT_NODE_LOST_AFTER_MS, type NodeLossInput, type NodeLossDecision } from "./decide-node-loss.ts";
