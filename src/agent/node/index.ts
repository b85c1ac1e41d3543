// The node agent's control loop: the ImpVM state machine, the VM runtime, ImpNode and Lease.
export { loadAgentConfig, parseAgentConfig, type AgentConfig } from "./agent-config.ts";
export { AgentMetrics } from "./agent-metrics.ts";
export { AGENT_VERSION, createNodeAgent, vmCmdline, type CreateNodeAgentOptions } from "./create-node-agent.ts";
export { handOffExec, workloadExecId, type HandoffDeps, type HandoffResult } from "./exec-handoff.ts";
export { connectGuest } from "./guest-connection.ts";
export { newLocalVm, type LocalStage, type LocalVm, type VmOutcome } from "./local-vm.ts";
export { loadOrCreateNodeKey, NODE_KEY_FILE } from "./node-key-store.ts";
export { NodeAgent, SECRET_RESOURCE, type NodeAgentOptions, type SecretObject } from "./node-agent.ts";
export { DEFAULT_LEASE_DURATION_SECONDS, leaseNameOf, NodeReporter, type NodeFacts } from "./node-reporter.ts";
export { AGENT_TABLE, apiSituation, decideVm, statusFromLocal, type AgentAction, type AgentDecision } from "./vm-decision.ts";
export { VmImages } from "./vm-images.ts";
export { planVm, type KernelFiles, type VmPlan } from "./vm-plan.ts";
export { DEFAULT_RUNTIME_TIMEOUTS, outcomeOfBootFailure, outcomeOfExit, VmRuntime, type VmNetworkProvider, type VmRuntimeOptions } from "./vm-runtime.ts";
