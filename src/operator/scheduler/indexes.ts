/**
 * Informer indexes the scheduler and the node-loss controller share. Names are prefixed so they
 * cannot collide with indexes other operator controllers add to the same informers, and added with
 * `ensureIndex` so two controllers on one informer share one index.
 */
import { isTerminalVMPhase, type ImpNode, type ImpVM } from "../../api/index.ts";
import type { DeepReadonly, IndexFunc, Informer, KubeObject } from "../../kube/index.ts";
import { parseReservations } from "./reservations.ts";

/** ImpVMs by status.nodeName. */
export const VMS_BY_NODE = "imp-operator/vm-by-node";
/** ImpVMs by metadata.uid. */
export const VMS_BY_UID = "imp-operator/vm-by-uid";
/** ImpVMs waiting for a node (value PENDING). */
export const VMS_PENDING = "imp-operator/vm-pending";
export const PENDING = "pending";
/** ImpNodes by the uids their reservation record holds. */
export const NODES_BY_RESERVED_UID = "imp-operator/node-by-reserved-uid";

/** Waiting for the scheduler: no node yet, not ended, not being deleted. */
export function isPendingUnbound(vm: DeepReadonly<ImpVM>): boolean {
  const phase = vm.status?.phase;
  return (phase === undefined || phase === "Pending") && vm.status?.nodeName === undefined && vm.metadata.deletionTimestamp === undefined;
}

export function isTerminalVM(vm: DeepReadonly<ImpVM>): boolean {
  const phase = vm.status?.phase;
  return phase !== undefined && isTerminalVMPhase(phase);
}

export function ensureIndex<T extends KubeObject>(informer: Informer<T>, name: string, fn: IndexFunc<T>): void {
  try {
    informer.addIndex(name, fn);
  } catch (err) {
    if (!(err instanceof Error && err.message.includes("already exists"))) throw err;
  }
}

export function addVmIndexes(vms: Informer<ImpVM>): void {
  ensureIndex(vms, VMS_BY_NODE, (vm) => [vm.status?.nodeName]);
  ensureIndex(vms, VMS_BY_UID, (vm) => [vm.metadata.uid]);
  ensureIndex(vms, VMS_PENDING, (vm) => (isPendingUnbound(vm) ? [PENDING] : []));
}

export function addNodeIndexes(nodes: Informer<ImpNode>): void {
  ensureIndex(nodes, NODES_BY_RESERVED_UID, (node) => {
    const parsed = parseReservations(node);
    return parsed.ok ? Object.keys(parsed.record) : [];
  });
}
