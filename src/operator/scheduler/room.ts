/**
 * How many more VMs of one request the cluster can place now, by the same filters and arithmetic as
 * `decidePlacement` (a node the scheduler would refuse holds no room), for the pools that must not
 * take jobs they cannot place: a scale-set pool tells GitHub its capacity from this (issue: jobs
 * acquired beyond it wait on a pool that cannot run them, while another scale set could).
 */
import { judgeNode, nodeUsage, type BoundVm, type PlacementInput } from "./decide-placement.ts";
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

/**
 * The VMs of `request` the cluster's nodes have room for now (their reservations and bound VMs
 * counted), after `waiting` — VMs already waiting to be placed, which the scheduler may place first —
 * took theirs: each goes, in order, to the first node (by name) that would take it, and one that no
 * node takes (another arch, too big, a class that does not resolve) takes nothing.
 */
export function roomFor(request: VmRequest, input: RoomInput, waiting: readonly VmRequest[] = []): number {
  const nodes = [...input.nodes].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const bound = new Map<string, BoundVm[]>(nodes.map((n) => [n.metadata.name, [...(input.bound.get(n.metadata.name) ?? [])]]));
  const fits = (node: (typeof nodes)[number], r: VmRequest): boolean => {
    const name = node.metadata.name;
    const kubeNode = input.deletedKubeNodes?.has(name) === true ? "deleted" : input.cordonedKubeNodes?.has(name) === true ? "cordoned" : "schedulable";
    return judgeNode(node, r, input.leases.get(name), bound.get(name) ?? [], input.nowMs, input.maxLeaseAgeMs, kubeNode).fits;
  };
  waiting.forEach((r, i) => {
    const node = nodes.find((n) => fits(n, r));
    if (node !== undefined) bound.get(node.metadata.name)?.push({ uid: `waiting-${i}`, phase: "Pending", resources: r });
  });
  let room = 0;
  for (const node of nodes) {
    if (!fits(node, request)) continue;
    const capacity = node.status?.capacity;
    const parsed = parseReservations(node);
    if (capacity === undefined || !parsed.ok) continue;
    room += copiesThatFit(request, capacity, nodeUsage(parsed.record, bound.get(node.metadata.name) ?? []));
  }
  return room;
}
