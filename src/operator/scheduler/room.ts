/**
 * How many more VMs of one request the cluster can place now, by the same filters and arithmetic as
 * `decidePlacement` (a node the scheduler would refuse holds no room), for the pools that must not
 * take jobs they cannot place: a scale-set pool tells GitHub its capacity from this (issue: jobs
 * acquired beyond it wait on a pool that cannot run them, while another scale set could).
 */
import { judgeNode, nodeUsage, type PlacementInput } from "./decide-placement.ts";
import { parseReservations } from "./reservations.ts";
import type { Resources, VmRequest } from "./vm-request.ts";

export type RoomInput = Omit<PlacementInput, "vmUid" | "pinnedNode" | "request">;

/** Copies of `request` that fit in what `capacity` leaves after `used`, on every dimension. */
export function copiesThatFit(request: Resources, capacity: Resources, used: Resources): number {
  let copies = Number.POSITIVE_INFINITY;
  for (const [want, cap, taken] of [
    [request.vcpu, capacity.vcpu, used.vcpu],
    [request.memoryMiB, capacity.memoryMiB, used.memoryMiB],
    [request.vmSlots, capacity.vmSlots, used.vmSlots],
  ] as const) {
    if (want <= 0) continue;
    copies = Math.min(copies, Math.floor(Math.max(0, cap - taken) / want));
  }
  return Number.isFinite(copies) ? copies : 0;
}

/** The VMs of `request` the cluster's nodes have room for now (their reservations and bound VMs counted). */
export function roomFor(request: VmRequest, input: RoomInput): number {
  let room = 0;
  for (const node of input.nodes) {
    const name = node.metadata.name;
    const kubeNode = input.deletedKubeNodes?.has(name) === true ? "deleted" : input.cordonedKubeNodes?.has(name) === true ? "cordoned" : "schedulable";
    const bound = input.bound.get(name) ?? [];
    if (!judgeNode(node, request, input.leases.get(name), bound, input.nowMs, input.maxLeaseAgeMs, kubeNode).fits) continue;
    const capacity = node.status?.capacity;
    const parsed = parseReservations(node);
    if (capacity === undefined || !parsed.ok) continue;
    room += copiesThatFit(request, capacity, nodeUsage(parsed.record, bound));
  }
  return room;
}
