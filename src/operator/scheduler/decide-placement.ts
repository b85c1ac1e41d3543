/**
 * The scheduler's decision for one pending ImpVM, a pure function of the caches and the clock:
 * which node to bind it to, or why none will do. The act side (bind-protocol.ts) re-checks the fit
 * against the freshest reservation record before anything is written, so a stale cache can cost a
 * retry but never an overcommit.
 *
 * Filters, in the order a message names them: pinned node (spec.nodeName), cordon
 * (spec.unschedulable), a fresh agent Lease, reported capacity, a readable reservation record,
 * architecture, kernel (when the node lists its kernels), a setup key (runner VMs), then vCPU,
 * memory and VM slots. Kubernetes Node labels and taints are not consulted: ImpVM has no
 * nodeSelector or tolerations to match them against.
 *
 * Placement is least-allocated (spread): among the fitting nodes whose mean free fraction after
 * placing the VM is within `SPREAD_TOLERANCE` of the largest, the VM's uid picks one (a hash). The
 * scheduler places several VMs at once from one cache: had they all taken the one emptiest node,
 * every placement but one would meet a 409 on that node's reservation record and go round again
 * (bench:operator: a burst of 1,000 VMs bound at ~6 a second). The same VM in the same state still
 * picks the same node, on any replica.
 */
import { isTerminalVMPhase, type ImpNode, type VMPhase } from "../../api/index.ts";
import type { DeepReadonly, Lease, Cached } from "../../kube/index.ts";
import { isLeaseFresh } from "./agent-lease.ts";
import { parseReservations, reservedTotal, type ReservationRecord } from "./reservations.ts";
import type { Resources, VmRequest } from "./vm-request.ts";

/** A VM bound to a node (status.nodeName), as the usage count needs it. */
export interface BoundVm {
  readonly uid: string;
  readonly phase: VMPhase | undefined;
  /** Its request, when its class can still be resolved; otherwise it counts one slot only. */
  readonly resources: Resources | undefined;
}

export interface PlacementInput {
  readonly vmUid: string;
  readonly request: VmRequest;
  /** spec.nodeName: only this node is considered. */
  readonly pinnedNode: string | undefined;
  readonly nodes: readonly Cached<ImpNode>[];
  /** Agent Lease per node name. */
  readonly leases: ReadonlyMap<string, DeepReadonly<Lease>>;
  /** VMs whose status.nodeName is the key. */
  readonly bound: ReadonlyMap<string, readonly BoundVm[]>;
  readonly nowMs: number;
  /** The node-loss bound: a Lease renewed longer ago than this is stale even within its duration. */
  readonly maxLeaseAgeMs?: number;
  /** Nodes whose core/v1 Node was deleted (KubeNodeTracker). */
  readonly deletedKubeNodes?: ReadonlySet<string>;
  /** Nodes whose core/v1 Node is cordoned (`kubectl cordon`, `kubectl drain`). */
  readonly cordonedKubeNodes?: ReadonlySet<string>;
}

export type Placement =
  /** Bind here. `rollForward`: a reservation for this VM already exists there (an earlier attempt, maybe another replica's). */
  | { readonly kind: "bind"; readonly nodeName: string; readonly rollForward: boolean }
  | { readonly kind: "unschedulable"; readonly message: string };

/** What a node holds: its reservation record plus bound, non-terminal VMs the record does not list. */
export function nodeUsage(record: ReservationRecord, bound: readonly BoundVm[]): Resources {
  const reserved = reservedTotal(record);
  let { vcpu, memoryMiB, vmSlots } = reserved;
  for (const vm of bound) {
    if (vm.phase !== undefined && isTerminalVMPhase(vm.phase)) continue;
    if (Object.hasOwn(record, vm.uid)) continue;
    vcpu += vm.resources?.vcpu ?? 0;
    memoryMiB += vm.resources?.memoryMiB ?? 0;
    vmSlots += 1;
  }
  return { vcpu, memoryMiB, vmSlots };
}

/** The resource names that do not fit (empty = fits). */
export function shortfall(request: Resources, capacity: Resources, used: Resources): string[] {
  const short: string[] = [];
  if (used.vcpu + request.vcpu > capacity.vcpu) short.push("vcpu");
  if (used.memoryMiB + request.memoryMiB > capacity.memoryMiB) short.push("memory");
  if (used.vmSlots + request.vmSlots > capacity.vmSlots) short.push("VM slots");
  return short;
}

/** Mean free fraction after placing `request` (higher = emptier). */
export function freeScore(request: Resources, capacity: Resources, used: Resources): number {
  const dims: [number, number][] = [
    [capacity.vcpu, used.vcpu + request.vcpu],
    [capacity.memoryMiB, used.memoryMiB + request.memoryMiB],
    [capacity.vmSlots, used.vmSlots + request.vmSlots],
  ];
  const fractions = dims.filter(([cap]) => cap > 0).map(([cap, after]) => (cap - after) / cap);
  return fractions.length === 0 ? 0 : fractions.reduce((a, b) => a + b, 0) / fractions.length;
}

type Verdict = { readonly fits: true; readonly score: number } | { readonly fits: false; readonly why: string };

/** Whether `node` can take `request` now; the first failing filter is the reason. */
export function judgeNode(
  node: Cached<ImpNode>,
  request: VmRequest,
  lease: DeepReadonly<Lease> | undefined,
  bound: readonly BoundVm[],
  nowMs: number,
  maxLeaseAgeMs?: number,
  kubeNode: "deleted" | "cordoned" | "schedulable" = "schedulable",
): Verdict {
  // Node loss fails every VM of such a node at once: binding one there would only burn it.
  if (kubeNode === "deleted") return { fits: false, why: "its Node was deleted" };
  if (kubeNode === "cordoned") return { fits: false, why: "its Node is cordoned (kubectl cordon)" };
  if (node.spec?.unschedulable === true) return { fits: false, why: "cordoned (spec.unschedulable)" };
  if (lease === undefined) return { fits: false, why: "no agent Lease" };
  if (!isLeaseFresh(lease, nowMs, maxLeaseAgeMs)) return { fits: false, why: "agent Lease stale" };
  const capacity = node.status?.capacity;
  if (capacity === undefined) return { fits: false, why: "reports no capacity" };
  const parsed = parseReservations(node);
  if (!parsed.ok) return { fits: false, why: parsed.message };
  const arch = node.status?.arch;
  if (arch !== undefined && arch !== request.arch) return { fits: false, why: `arch ${arch}, VM needs ${request.arch}` };
  const kernels = node.status?.kernels;
  if (kernels !== undefined && kernels.length > 0 && !kernels.includes(request.kernel)) return { fits: false, why: `no kernel "${request.kernel}"` };
  if (request.needsSetupKey && node.status?.setupKey === undefined) return { fits: false, why: "no setup key (needed by runner VMs)" };
  const used = nodeUsage(parsed.record, bound);
  const short = shortfall(request, capacity, used);
  if (short.length > 0) return { fits: false, why: `not enough ${short.join(", ")}` };
  return { fits: true, score: freeScore(request, capacity, used) };
}

export const describeRequest = (r: Resources): string => `${r.vcpu} vCPU, ${r.memoryMiB} MiB, ${r.vmSlots} VM slot${r.vmSlots === 1 ? "" : "s"}`;

/** Nodes this close to the emptiest (in mean free fraction: 0.1 is a tenth of a node) count as equally good. */
export const SPREAD_TOLERANCE = 0.1;

/** FNV-1a, 32 bits: a stable, well-spread number from a VM's uid. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

/**
 * The node a VM takes among those that fit (in name order, each with its freeScore): one within
 * SPREAD_TOLERANCE of the emptiest, by a hash of the VM's uid. Shared with the room count
 * (room.ts), which must place waiting VMs where the scheduler will.
 */
export function pickAmong(fitting: ReadonlyArray<{ readonly name: string; readonly score: number }>, vmUid: string): string | undefined {
  if (fitting.length === 0) return undefined;
  const top = Math.max(...fitting.map((f) => f.score));
  const near = fitting.filter((f) => f.score >= top - SPREAD_TOLERANCE);
  return near[fnv1a(vmUid) % near.length]!.name;
}

export function decidePlacement(input: PlacementInput): Placement {
  const { request, pinnedNode, nowMs } = input;
  const byName = [...input.nodes].sort((a, b) => (a.metadata.name).localeCompare(b.metadata.name));

  const reservedOn = byName.filter((n) => {
    const parsed = parseReservations(n);
    return parsed.ok && Object.hasOwn(parsed.record, input.vmUid);
  });
  const rollTo = reservedOn[0]?.metadata.name;
  if (rollTo !== undefined) return { kind: "bind", nodeName: rollTo, rollForward: true };

  const candidates = pinnedNode === undefined ? byName : byName.filter((n) => n.metadata.name === pinnedNode);
  if (pinnedNode !== undefined && candidates.length === 0) {
    return { kind: "unschedulable", message: `pinned to node ${pinnedNode}, which has no ImpNode` };
  }
  if (candidates.length === 0) return { kind: "unschedulable", message: "no ImpNodes exist (no agent has registered)" };

  const fitting: { name: string; score: number }[] = [];
  const reasons: string[] = [];
  for (const node of candidates) {
    const name = node.metadata.name;
    const kubeNode = input.deletedKubeNodes?.has(name) === true ? "deleted" : input.cordonedKubeNodes?.has(name) === true ? "cordoned" : "schedulable";
    const verdict = judgeNode(node, request, input.leases.get(name), input.bound.get(name) ?? [], nowMs, input.maxLeaseAgeMs, kubeNode);
    if (!verdict.fits) {
      reasons.push(`${name}: ${verdict.why}`);
      continue;
    }
    fitting.push({ name, score: verdict.score });
  }
  const chosen = pickAmong(fitting, input.vmUid);
  if (chosen !== undefined) return { kind: "bind", nodeName: chosen, rollForward: false };
  const scope = pinnedNode === undefined ? `0/${candidates.length} nodes fit` : `pinned node does not fit`;
  return { kind: "unschedulable", message: `${scope} (VM needs ${describeRequest(request)}): ${reasons.join("; ")}` };
}
