/**
 * The per-node reservation record: which VMs (by uid) hold how much of an ImpNode, kept in an
 * annotation on the ImpNode's main resource. The agent writes only the ImpNode's status (through the
 * status subresource, which leaves metadata alone), so the record is the scheduler's alone; it is
 * the object every bind compare-and-swaps on (see bind-protocol.ts for why that is race-free).
 */
import type { DeepReadonly } from "../../kube/index.ts";
import type { ImpNode } from "../../api/index.ts";
import type { Resources } from "./vm-request.ts";

/** Annotation on ImpNode holding the record (JSON). */
export const RESERVATIONS_ANNOTATION = "imp.dev/reservations";

export interface Reservation {
  readonly namespace: string;
  readonly name: string;
  readonly vcpu: number;
  readonly memoryMiB: number;
}

/** uid → reservation. */
export type ReservationRecord = Readonly<Record<string, Reservation>>;

export type ParsedRecord = { readonly ok: true; readonly record: ReservationRecord } | { readonly ok: false; readonly message: string };

const isCount = (x: unknown): x is number => typeof x === "number" && Number.isInteger(x) && x >= 0;

/**
 * Reads the record. Anyone who may edit ImpNodes may edit it, so it is checked field by field; an
 * unreadable record makes the node unschedulable (never "empty", which would overcommit it).
 */
export function parseReservations(node: DeepReadonly<ImpNode>): ParsedRecord {
  const text = node.metadata.annotations?.[RESERVATIONS_ANNOTATION];
  if (text === undefined || text === "") return { ok: true, record: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, message: `annotation ${RESERVATIONS_ANNOTATION} is not JSON` };
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return { ok: false, message: `annotation ${RESERVATIONS_ANNOTATION} is not an object` };
  const record: Record<string, Reservation> = {};
  for (const [uid, value] of Object.entries(parsed as Record<string, unknown>)) {
    const r = value as Partial<Record<keyof Reservation, unknown>> | null;
    if (typeof r !== "object" || r === null || typeof r.namespace !== "string" || typeof r.name !== "string" || !isCount(r.vcpu) || !isCount(r.memoryMiB)) {
      return { ok: false, message: `annotation ${RESERVATIONS_ANNOTATION} has a malformed entry for uid ${uid.slice(0, 64)}` };
    }
    record[uid] = { namespace: r.namespace, name: r.name, vcpu: r.vcpu, memoryMiB: r.memoryMiB };
  }
  return { ok: true, record };
}

/** Serialises with sorted keys, so the same record is always the same text (no-op writes stay no-ops). */
export function serializeReservations(record: ReservationRecord): string {
  const sorted: Record<string, Reservation> = {};
  for (const uid of Object.keys(record).sort()) sorted[uid] = record[uid] as Reservation;
  return JSON.stringify(sorted);
}

export function withReservation(record: ReservationRecord, uid: string, reservation: Reservation): ReservationRecord {
  return { ...record, [uid]: reservation };
}

export function withoutReservations(record: ReservationRecord, uids: Iterable<string>): ReservationRecord {
  const next: Record<string, Reservation> = { ...record };
  for (const uid of uids) delete next[uid];
  return next;
}

/** Total the record holds, each entry one VM slot. */
export function reservedTotal(record: ReservationRecord): Resources {
  let vcpu = 0;
  let memoryMiB = 0;
  let vmSlots = 0;
  for (const r of Object.values(record)) {
    vcpu += r.vcpu;
    memoryMiB += r.memoryMiB;
    vmSlots += 1;
  }
  return { vcpu, memoryMiB, vmSlots };
}
