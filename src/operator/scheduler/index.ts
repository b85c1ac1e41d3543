/** The operator's scheduler: places pending ImpVMs on nodes with a live agent and room. */
export { SchedulerController, UNSCHEDULABLE_RETRY, RESERVATION_RECHECK_MS, nodeMayHaveRoom, type SchedulerControllerOptions } from "./scheduler-controller.ts";
export { decidePlacement, judgeNode, nodeUsage, shortfall, freeScore, type BoundVm, type Placement, type PlacementInput } from "./decide-placement.ts";
export { resolveRequest, templateSpecOf, DEFAULT_KERNEL, type Resources, type VmRequest, type RequestLookups, type RequestResult } from "./vm-request.ts";
export { RESERVATIONS_ANNOTATION, parseReservations, serializeReservations, reservedTotal, type Reservation, type ReservationRecord } from "./reservations.ts";
export { AGENT_LEASE_PREFIX, DEFAULT_LEASE_MAX_AGE_MS, agentLeaseName, nodeOfLease, isLeaseFresh, renewTimeMs } from "./agent-lease.ts";
export { VMS_BY_NODE, VMS_BY_UID, addVmIndexes, addNodeIndexes, isPendingUnbound, isTerminalVM } from "./indexes.ts";
export { KubeNodeTracker, nodeCordoned, type KubeNodeState } from "./kube-nodes.ts";
