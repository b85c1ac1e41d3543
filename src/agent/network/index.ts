// The node's VM network: bridge, taps, addresses, NAT and the isolation ruleset (docs/network.md).
export { AddressAllocator, macFor, type GuestAddress } from "./allocator.ts";
export { commandRunner, type CommandResult, type NetCommandRunner, type RunOptions } from "./commands.ts";
export { BUILTIN_BLOCKED_V4, BUILTIN_BLOCKED_V6, DEFAULT_NODE_NETWORK, NON_PUBLIC_V4, resolveNetworkConfig, type NodeNetworkConfig, type ResolvedNetworkConfig } from "./config.ts";
export { INTERNET_EGRESS, NodeNetwork, normalizeEgress, type AttachOptions, type EgressPolicy, type GuestNetwork, type NodeNetworkLease, type NodeNetworkOptions, type PortKind } from "./manager.ts";
export { renderRuleset, renderTeardown, type RulesetInput, type RulesetPort } from "./ruleset.ts";
export { tapNameFor, type EgressMode } from "./tap-name.ts";
