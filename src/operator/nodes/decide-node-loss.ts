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
 * A node whose core/v1 Node is Ready (its kubelet heartbeats) while its agent's Lease is stale has a
 * live machine whose agent is restarting — an upgrade's rolling restart, a crash, a slow start on a
 * starved CPU (a loaded machine took 65 s from container start to the agent's first log line). Its
 * VMs run on under their supervisors and the new agent adopts them, so failing them would fail jobs
 * that are fine: such a node gets `agentRestartGraceMs` more. A machine that really goes loses its
 * kubelet too, and the Node turns NotReady/Unknown, so the shorter bound applies again.
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
/** Added to the bound while the node's Node is Ready: room for an agent Pod to restart on a busy machine. */
export const DEFAULT_AGENT_RESTART_GRACE_MS = 180_000;


export interface NodeLossInput {
  readonly nodeName: string;
  readonly lease: DeepReadonly<Lease> | undefined;
  /** When this process first saw the Lease missing (its clock); undefined while it exists. */
  readonly leaseMissingSinceMs: number | undefined;
  readonly kubeNode: KubeNodeState;
  /** The machine's Node is Ready=True (its kubelet is alive). */
  readonly kubeNodeReady: boolean;
  readonly nowMs: number;
  /** When this process began watching Leases (its clock): every node gets the full bound from then. */
  readonly watchingSinceMs: number;
  readonly lostAfterMs: number;
  /** Added to `lostAfterMs` while `kubeNodeReady`. */
  readonly agentRestartGraceMs: number;
}

export type NodeLossDecision =
  | { readonly lost: false; /** Look again after this long: when the node would be lost without news. */ readonly recheckInMs: number }
  | { readonly lost: true; readonly message: string; /** No Node for it in the cluster: its VMs' teardown will never run. */ readonly machineGone: boolean };

/** No Node for the machine in the cluster: deleted, or absent once Nodes are listed. */
export function machineGone(kubeNode: KubeNodeState): boolean {
  return kubeNode === "deleted" || kubeNode === "never";
}

export function decideNodeLoss(input: NodeLossInput): NodeLossDecision {
  const { nodeName, nowMs } = input;
  const lostAfterMs = input.kubeNodeReady ? input.lostAfterMs + input.agentRestartGraceMs : input.lostAfterMs;
  const limit = `limit ${Math.round(lostAfterMs / 1000)} s${input.kubeNodeReady ? ", its Node being Ready" : ""}`;
  if (input.kubeNode === "deleted") return { lost: true, message: `Node ${nodeName} was deleted`, machineGone: true };
  const gone = machineGone(input.kubeNode);
  if (input.lease === undefined) {
    const since = input.leaseMissingSinceMs ?? nowMs;
    const lostAt = since + lostAfterMs;
    return nowMs >= lostAt
      ? { lost: true, message: `Node ${nodeName}: its agent Lease has been missing for ${Math.round((nowMs - since) / 1000)} s (${limit})`, machineGone: gone }
      : { lost: false, recheckInMs: lostAt - nowMs };
  }
  const renewed = renewTimeMs(input.lease);
  if (renewed === undefined) return { lost: true, message: `Node ${nodeName}: its agent Lease has no renewTime`, machineGone: gone };
  const lostAt = Math.max(renewed, input.watchingSinceMs) + lostAfterMs;
  if (nowMs >= lostAt) return { lost: true, message: `Node ${nodeName}: its agent Lease was last renewed ${Math.round((nowMs - renewed) / 1000)} s ago (${limit})`, machineGone: gone };
  return { lost: false, recheckInMs: lostAt - nowMs };
}
