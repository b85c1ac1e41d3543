/**
 * Whether a node is lost, a pure function of its agent Lease, its core/v1 Node (when watched) and
 * the clock. Lost = the Lease's last renewal is more than `lostAfterMs` old on the operator's clock,
 * or the Lease has been missing that long as this process observed it, or a Node object that existed
 * was deleted. A lost node's non-terminal VMs are marked Failed/NodeLost; being terminal, they are
 * never scheduled again.
 *
 * Staleness counts from the later of the renewal and the moment this process began watching: the
 * operator exits when it loses leadership, which an API server outage causes, and no agent could
 * renew its Lease during that outage either. Had staleness counted from renewTime alone, the
 * restarted operator would find every node lost and fail every running job. (The node lifecycle
 * controller of Kubernetes measures from its own first observation for the same reason.)
 *
 * A lost node whose machine has no Node in the cluster (deleted, or never there once Nodes are
 * listed: an operator that restarted after the deletion never saw it) will never run its agent
 * again under that name, so nothing will tear its VMs down: `machineGone` lets the controller take
 * the agent's teardown finalizer off, as Kubernetes' pod garbage collector force-deletes the Pods
 * of a deleted Node. A machine that does come back sweeps what those VMs left.
 */
import type { DeepReadonly, Lease } from "../../kube/index.ts";
import { DEFAULT_LEASE_MAX_AGE_MS, renewTimeMs } from "../scheduler/agent-lease.ts";
import type { KubeNodeState } from "../scheduler/kube-nodes.ts";

/** Pass the same value to the scheduler (nodeLostAfterMs), so a lost node is not chosen either. */
export const DEFAULT_NODE_LOST_AFTER_MS = DEFAULT_LEASE_MAX_AGE_MS;


export interface NodeLossInput {
  readonly nodeName: string;
  readonly lease: DeepReadonly<Lease> | undefined;
  /** When this process first saw the Lease missing (its clock); undefined while it exists. */
  readonly leaseMissingSinceMs: number | undefined;
  readonly kubeNode: KubeNodeState;
  readonly nowMs: number;
  /** When this process began watching Leases (its clock): every node gets the full bound from then. */
  readonly watchingSinceMs: number;
  readonly lostAfterMs: number;
}

export type NodeLossDecision =
  | { readonly lost: false; /** Look again after this long: when the node would be lost without news. */ readonly recheckInMs: number }
  | { readonly lost: true; readonly message: string; /** No Node for it in the cluster: its VMs' teardown will never run. */ readonly machineGone: boolean };

/** No Node for the machine in the cluster: deleted, or absent once Nodes are listed. */
export function machineGone(kubeNode: KubeNodeState): boolean {
  return kubeNode === "deleted" || kubeNode === "never";
}

export function decideNodeLoss(input: NodeLossInput): NodeLossDecision {
  const { nodeName, nowMs, lostAfterMs } = input;
  if (input.kubeNode === "deleted") return { lost: true, message: `Node ${nodeName} was deleted`, machineGone: true };
  const gone = machineGone(input.kubeNode);
  if (input.lease === undefined) {
    const since = input.leaseMissingSinceMs ?? nowMs;
    const lostAt = since + lostAfterMs;
    return nowMs >= lostAt
      ? { lost: true, message: `Node ${nodeName}: its agent Lease has been missing for ${Math.round((nowMs - since) / 1000)} s`, machineGone: gone }
      : { lost: false, recheckInMs: lostAt - nowMs };
  }
  const renewed = renewTimeMs(input.lease);
  if (renewed === undefined) return { lost: true, message: `Node ${nodeName}: its agent Lease has no renewTime`, machineGone: gone };
  const lostAt = Math.max(renewed, input.watchingSinceMs) + lostAfterMs;
  if (nowMs >= lostAt) return { lost: true, message: `Node ${nodeName}: its agent Lease was last renewed ${Math.round((nowMs - renewed) / 1000)} s ago (limit ${Math.round(lostAfterMs / 1000)} s)`, machineGone: gone };
  return { lost: false, recheckInMs: lostAt - nowMs };
}
