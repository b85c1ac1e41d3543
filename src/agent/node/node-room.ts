/**
 * The node's own arithmetic of room, for what the scheduler does not place: a template VM (memory
 * snapshots) is built by the agent, not bound by the operator, so the agent checks it fits beside the
 * job VMs it holds, and reports its capacity less what such VMs hold while they run.
 */
import type { HeldResources as NodeResources } from "../vm/index.ts";

/** Whether `want` fits in `capacity` beside `held`, on every dimension. */
export function fitsBeside(capacity: NodeResources, held: NodeResources, want: NodeResources): boolean {
  return held.vcpu + want.vcpu <= capacity.vcpu && held.memoryMiB + want.memoryMiB <= capacity.memoryMiB && held.vmSlots + want.vmSlots <= capacity.vmSlots;
}

/** The capacity job VMs may use: the node's, less what its own template VMs hold (never below zero). */
export function capacityForJobs(capacity: NodeResources, heldByTemplates: NodeResources): NodeResources {
  return {
    vcpu: Math.max(0, capacity.vcpu - heldByTemplates.vcpu),
    memoryMiB: Math.max(0, capacity.memoryMiB - heldByTemplates.memoryMiB),
    vmSlots: Math.max(0, capacity.vmSlots - heldByTemplates.vmSlots),
  };
}
