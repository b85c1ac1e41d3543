// The node agent's control loop: the ImpVM state machine, ImpNode and Lease, the sweep.
export { loadAgentConfig, parseAgentConfig, type AgentConfig } from "./agent-config.ts";
export { AgentMetrics } from "./agent-metrics.ts";
export { AGENT_VERSION, createNodeAgent, type CreateNodeAgentOptions } from "./create-node-agent.ts";
export { loadOrCreateNodeKey, NODE_KEY_FILE } from "./node-key-store.ts";
export { NodeAgent, type NodeAgentOptions } from "./node-agent.ts";
export { DEFAULT_LEASE_DURATION_SECONDS, leaseNameOf, NodeReporter, type NodeFacts } from "./node-reporter.ts";
export { AGENT_TABLE, apiSituation, decideVm, statusFromLocal, type AgentAction, type AgentDecision } from "./vm-decision.ts";
export { bootRequestOf, planVm, withImageCredentials, type KernelFiles, type VmPlan } from "./vm-plan.ts";
