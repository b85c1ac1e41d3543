/**
 * The node agent's liveness Lease as the operator reads it. The agent renews a
 * coordination.k8s.io Lease named `imp-agent-<node>` (holderIdentity = node name) every few seconds;
 * the operator judges it on its own clock. The name must match the agent's `leaseNameOf`
 * (src/agent/node/node-reporter.ts): the operator may not import the agent, so the prefix is
 * repeated here.
 */
import type { DeepReadonly, Lease, Cached } from "../../kube/index.ts";

export const AGENT_LEASE_PREFIX = "imp-agent-";

export const agentLeaseName = (nodeName: string): string => `${AGENT_LEASE_PREFIX}${nodeName}`;

/** The node a Lease speaks for, or undefined when it is not an agent Lease (e.g. the operator's own). */
export function nodeOfLease(lease: Cached<Lease>): string | undefined {
  const name = lease.metadata.name;
  return name.startsWith(AGENT_LEASE_PREFIX) && name.length > AGENT_LEASE_PREFIX.length ? name.slice(AGENT_LEASE_PREFIX.length) : undefined;
}

/** The agent's last renewal in epoch ms, or undefined when the Lease has none (or an unreadable one). */
export function renewTimeMs(lease: DeepReadonly<Lease> | undefined): number | undefined {
  const text = lease?.spec?.renewTime ?? lease?.spec?.acquireTime;
  if (text === undefined) return undefined;
  const ms = Date.parse(text);
  return Number.isFinite(ms) ? ms : undefined;
}

/**
 * How old an agent's last renewal may be before its node is lost (node-loss controller) and, the
 * same bound, before the scheduler stops choosing it: a node whose VMs were just failed as NodeLost
 * must not receive new ones.
 */
export const DEFAULT_LEASE_MAX_AGE_MS = 40_000;

/**
 * Fresh = renewed, and neither its own leaseDurationSeconds nor `maxAgeMs` has passed since on
 * `nowMs`. A Lease without a duration is never fresh: nothing says how long its renewal is good for.
 */
export function isLeaseFresh(lease: DeepReadonly<Lease> | undefined, nowMs: number, maxAgeMs: number = DEFAULT_LEASE_MAX_AGE_MS): boolean {
  const renewed = renewTimeMs(lease);
  const durationS = lease?.spec?.leaseDurationSeconds;
  if (renewed === undefined || durationS === undefined || durationS <= 0) return false;
  return renewed + Math.min(durationS * 1000, maxAgeMs) > nowMs;
}
