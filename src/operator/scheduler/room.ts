/**
 * How many more VMs of one request the cluster can place now, by the same filters and arithmetic as
 * `decidePlacement` (a node the scheduler would refuse holds no room), for the pools that must not
 * take jobs they cannot place: a scale-set pool tells GitHub its capacity from this. VMs already
 * waiting to be placed take their room first, each where the scheduler would put it (`pickAmong`:
 * one of the nodes about as empty as the emptiest, by the VM's uid). Each node's reservation record is read once per look, whatever the number of
 * waiting VMs or pools asking: the scale-set listeners all ask at once when room changes.
 */
import { freeScore, judgeNode, nodeUsage, pickAmong, shortfall, type PlacementInput } from "./decide-placement.ts";
import { parseReservations } from "./reservations.ts";
import type { Resources, VmRequest } from "./vm-request.ts";

export type RoomInput = Omit<PlacementInput, "vmUid" | "pinnedNode" | "request">;

/** One node as room is counted: what it has, what is used (waiting VMs placed on it included). */
export interface NodeRoom {
  readonly name: string;
  readonly capacity: Resources | undefined;
  used: Resources;
  /** Whether the node takes a VM of a kind (arch, kernel, setup key), by judgeNode's filters; memoised per kind. */
  readonly takes: (request: VmRequest) => boolean;
}

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

/** The nodes, sorted by name, each with its usage read once from its record and bound VMs. */
export function nodeRooms(input: RoomInput): NodeRoom[] {
  return [...input.nodes]
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
    .map((node) => {
      const name = node.metadata.name;
      const bound = input.bound.get(name) ?? [];
      const parsed = parseReservations(node);
      const kubeNode = input.deletedKubeNodes?.has(name) === true ? "deleted" : input.cordonedKubeNodes?.has(name) === true ? "cordoned" : "schedulable";
      const kinds = new Map<string, boolean>();
      return {
        name,
        capacity: node.status?.capacity,
        used: parsed.ok ? nodeUsage(parsed.record, bound) : { vcpu: 0, memoryMiB: 0, vmSlots: 0 },
        takes: (r: VmRequest): boolean => {
          const kind = `${r.arch}|${r.kernel}|${r.needsSetupKey}`;
          let ok = kinds.get(kind);
          // Every filter but the resources: a request of nothing fits wherever the node takes the kind at all.
          if (ok === undefined) kinds.set(kind, (ok = judgeNode(node, { ...r, vcpu: 0, memoryMiB: 0, vmSlots: 0 }, input.leases.get(name), [], input.nowMs, input.maxLeaseAgeMs, kubeNode).fits));
          return ok;
        },
      };
    });
}

/** A VM waiting to be placed: what it asks for, and its uid (which picks its node among equals). */
export interface WaitingVm {
  readonly request: VmRequest;
  readonly uid: string;
}

/** Places each waiting VM, in order, where the scheduler would (pickAmong over the nodes that take it); returns each one's node, or undefined where none takes it. */
export function placeWaiting(rooms: readonly NodeRoom[], waiting: readonly WaitingVm[]): Array<string | undefined> {
  return waiting.map(({ request: r, uid }) => {
    const fitting: Array<{ name: string; score: number; room: NodeRoom }> = [];
    for (const room of rooms) {
      if (room.capacity === undefined || !room.takes(r) || shortfall(r, room.capacity, room.used).length > 0) continue;
      fitting.push({ name: room.name, score: freeScore(r, room.capacity, room.used), room });
    }
    const name = pickAmong(fitting, uid);
    const chosen = fitting.find((f) => f.name === name)?.room;
    if (chosen === undefined) return undefined;
    chosen.used = add(chosen.used, r, 1);
    return chosen.name;
  });
}

/** Copies of `request` the nodes have room for, as they are now. */
export function copiesIn(rooms: readonly NodeRoom[], request: VmRequest): number {
  let room = 0;
  for (const r of rooms) if (r.capacity !== undefined && r.takes(request)) room += copiesThatFit(request, r.capacity, r.used);
  return room;
}

/** The VMs of `request` the cluster's nodes have room for now, after `waiting` took theirs. */
export function roomFor(request: VmRequest, input: RoomInput, waiting: readonly WaitingVm[] = []): number {
  const rooms = nodeRooms(input);
  placeWaiting(rooms, waiting);
  return copiesIn(rooms, request);
}

/** `used` plus `sign` times `r`. */
export function add(used: Resources, r: Resources, sign: 1 | -1): Resources {
  return { vcpu: used.vcpu + sign * r.vcpu, memoryMiB: used.memoryMiB + sign * r.memoryMiB, vmSlots: used.vmSlots + sign * r.vmSlots };
}
