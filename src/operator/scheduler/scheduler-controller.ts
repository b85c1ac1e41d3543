/**
 * The scheduler: binds pending ImpVMs to nodes (decide-placement.ts decides, bind-protocol.ts
 * writes) and keeps the nodes' reservation records pruned. Two work queues: ImpVM keys (placement)
 * and ImpNode names (pruning). Pending VMs are re-queued when room may have appeared (an ImpNode's
 * capacity, cordon or record shrank; an agent Lease came back) and otherwise retried with a backoff.
 */
import type { Registry } from "prom-client";
import { LABELS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMTemplate } from "../../api/index.ts";
import {
  Controller,
  done,
  isNotFound,
  requeueAfter,
  type DeepReadonly,
  type EventRecorder,
  type Informer,
  type Lease,
  type ReconcileContext,
  type ReconcileResult,
  type ResourceClient,
  type Cached,
} from "../../kube/index.ts";
import { backoffDelay, conflictError, NO_FAULTS, silentLogger, systemClock, type BackoffPolicy, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import { agentLeaseName, isLeaseFresh, nodeOfLease } from "./agent-lease.ts";
import { bindVm, fateOf, labelVm, markUnschedulable, release, RELEASABLE, reserve, type ReservedVmFate } from "./bind-protocol.ts";
import { decidePlacement, describeRequest, type BoundVm } from "./decide-placement.ts";
import type { KubeNodeTracker } from "./kube-nodes.ts";
import { addNodeIndexes, addVmIndexes, isPendingUnbound, isTerminalVM, NODES_BY_RESERVED_UID, PENDING, VMS_BY_NODE, VMS_BY_UID, VMS_PENDING } from "./indexes.ts";
import { parseReservations, RESERVATIONS_ANNOTATION } from "./reservations.ts";
import { add, copiesIn, nodeRooms, placeWaiting, type NodeRoom, type RoomInput } from "./room.ts";
import { resolveRequest, type RequestLookups, type VmRequest } from "./vm-request.ts";

/** How long one look at the cluster serves every pool's capacity (a burst of VM events is one look). */
const ROOM_SNAPSHOT_MS = 200;

interface RoomSnapshot {
  readonly at: number;
  /** The nodes' room, every waiting VM placed on it. */
  readonly rooms: readonly NodeRoom[];
  /** Per pool (`namespace/name`): its VMs placed on a node or reserved on one, not ended, not being deleted. */
  readonly placed: ReadonlyMap<string, number>;
  /** VMs waiting to be placed, without a reservation, oldest first: their pool key and request. */
  readonly waiting: ReadonlyArray<{ readonly pool: string; readonly request: VmRequest; readonly uid: string }>;
  /** The node each waiting VM went to (placeWaiting), undefined where none takes it. */
  readonly placements: ReadonlyArray<string | undefined>;
  /** Each pool's capacity once counted in this look. */
  readonly capacity: Map<string, number>;
}

/** Retry of a VM no node fits, on top of event-driven re-queues: 1 s doubling to 1 min, forever. */
export const UNSCHEDULABLE_RETRY: BackoffPolicy = { baseMs: 1_000, factor: 2, capMs: 60_000, jitter: 0.2, maxAttempts: Infinity };
/** Safety net for missed events: a node with reservations is re-checked this often. */
export const RESERVATION_RECHECK_MS = 60_000;

export interface SchedulerControllerOptions {
  readonly vms: ResourceClient<ImpVM>;
  readonly nodes: ResourceClient<ImpNode>;
  readonly vmInformer: Informer<ImpVM>;
  readonly nodeInformer: Informer<ImpNode>;
  /** Leases in `leaseNamespace` (the agents' Lease namespace); other Leases there are ignored. */
  readonly leaseInformer: Informer<Lease>;
  readonly leaseNamespace: string;
  readonly classInformer: Informer<ImpVMClass>;
  readonly templateInformer: Informer<ImpVMTemplate>;
  readonly registry: Registry;
  readonly recorder?: EventRecorder;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /**
   * Placement workers (default 8). Concurrency is safe at any value (see bind-protocol.ts); a bind is
   * ~5 API calls in series, so 2 workers bound a 300-VM burst at p99 6.5 s and 8 at p99 0.9 s
   * (bench:operator, docs/operator.md), at the cost of some 409s on nodes two workers chose at once.
   */
  readonly workers?: number;
  /** Same value as the node-loss controller's lostAfterMs (default 40 s): older renewals make a node ineligible. */
  readonly nodeLostAfterMs?: number | undefined;
  /** core/v1 Nodes, the node-loss controller's tracker: a node whose Node was deleted is never chosen. */
  readonly kubeNodes?: KubeNodeTracker | undefined;
  /** Distinguishes controllers' metrics when two run in one process (tests). Default "scheduler". */
  readonly name?: string;
  /** Test fault point scheduler.before-bind (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
}

export class SchedulerController {
  readonly #o: SchedulerControllerOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #placement: Controller;
  readonly #pruning: Controller;
  readonly #lookups: RequestLookups;
  readonly #unschedulableAttempts = new Map<string, number>();
  #snapshot: RoomSnapshot | undefined;

  constructor(options: SchedulerControllerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ part: "scheduler" });
    const name = options.name ?? "scheduler";
    addVmIndexes(options.vmInformer);
    addNodeIndexes(options.nodeInformer);
    this.#lookups = {
      template: (namespace, n) => options.templateInformer.get(`${namespace}/${n}`),
      vmClass: (n) => options.classInformer.get(n),
    };
    const common = { registry: options.registry, clock: this.#clock, logger: this.#logger };
    this.#placement = new Controller({ ...common, name, workers: options.workers ?? 8, reconcile: (ctx) => this.#place(ctx) });
    this.#pruning = new Controller({ ...common, name: `${name}-reservations`, workers: 1, reconcile: (ctx) => this.#prune(ctx) });
    this.#wire();
  }

  /** Runs until `signal` aborts (Manager's Runnable). Caches must have synced. */
  async start(signal: AbortSignal): Promise<void> {
    await Promise.all([this.#placement.start(signal), this.#pruning.start(signal)]);
  }

  #pendingKeys(): string[] {
    return this.#o.vmInformer.indexKeys(VMS_PENDING, PENDING);
  }

  #wire(): void {
    const { vmInformer, nodeInformer, leaseInformer, classInformer, templateInformer } = this.#o;
    const requeuePending = (): void => {
      for (const key of this.#pendingKeys()) this.#placement.enqueue(key);
    };
    this.#placement.watch(vmInformer);
    this.#placement.watch(nodeInformer, { toKeys: () => this.#pendingKeys(), updateMatters: nodeMayHaveRoom });
    this.#placement.watch(leaseInformer, {
      toKeys: (lease) => (nodeOfLease(lease) === undefined ? [] : this.#pendingKeys()),
      updateMatters: (old, obj) => !isLeaseFresh(old, this.#clock.now(), this.#o.nodeLostAfterMs) && isLeaseFresh(obj, this.#clock.now(), this.#o.nodeLostAfterMs),
    });
    // A class or template appearing can make an unresolvable VM schedulable.
    classInformer.addEventHandler({ onAdd: requeuePending, onUpdate: (a, b) => a !== b && requeuePending() });
    templateInformer.addEventHandler({ onAdd: requeuePending, onUpdate: (a, b) => a !== b && requeuePending() });
    // `kubectl uncordon`: the node takes VMs again.
    this.#o.kubeNodes?.onCordonChanged((_name, cordoned) => !cordoned && requeuePending());

    this.#pruning.watch(nodeInformer, { updateMatters: (old, obj) => old.metadata.annotations?.[RESERVATIONS_ANNOTATION] !== obj.metadata.annotations?.[RESERVATIONS_ANNOTATION] });
    const toReservingNodes = (vm: Cached<ImpVM>): void => {
      const uid = vm.metadata.uid;
      if (uid !== undefined) for (const node of nodeInformer.indexKeys(NODES_BY_RESERVED_UID, uid)) this.#pruning.enqueue(node);
    };
    vmInformer.addEventHandler({
      onUpdate: (old, vm) => {
        if (old !== vm && (isTerminalVM(vm) || vm.status?.nodeName !== undefined || vm.metadata.deletionTimestamp !== undefined)) toReservingNodes(vm);
      },
      onDelete: toReservingNodes,
    });
  }

  #boundVms(nodeName: string): BoundVm[] {
    return this.#o.vmInformer.byIndex(VMS_BY_NODE, nodeName).map((vm) => {
      const r = resolveRequest(vm, this.#lookups);
      return { uid: vm.metadata.uid, phase: vm.status?.phase, resources: r.ok ? r.request : undefined };
    });
  }

  /** The nodes as placement sees them: each with its agent Lease, its bound VMs, and whether its Node was deleted or cordoned. */
  #cluster(): RoomInput & { readonly bound: Map<string, BoundVm[]> } {
    const nodes = this.#o.nodeInformer.list();
    const leases = new Map<string, DeepReadonly<Lease>>();
    const bound = new Map<string, BoundVm[]>();
    for (const node of nodes) {
      const name = node.metadata.name;
      const lease = this.#o.leaseInformer.get(`${this.#o.leaseNamespace}/${agentLeaseName(name)}`);
      if (lease !== undefined) leases.set(name, lease);
      bound.set(name, this.#boundVms(name));
    }
    const names = nodes.map((n) => n.metadata.name);
    return {
      nodes,
      leases,
      bound,
      nowMs: this.#clock.now(),
      ...(this.#o.nodeLostAfterMs === undefined ? {} : { maxLeaseAgeMs: this.#o.nodeLostAfterMs }),
      ...(this.#o.kubeNodes === undefined ? {} : { deletedKubeNodes: this.#o.kubeNodes.deletedAmong(names), cordonedKubeNodes: this.#o.kubeNodes.cordonedAmong(names) }),
    };
  }

  /**
   * How many jobs a pool can hold now (its scale set's capacity, docs/operator.md): its VMs placed
   * on a node or holding a reservation on one (not ended, not being deleted), plus the room the
   * cluster has for more of its class once the VMs of other pools already waiting to be placed took
   * theirs (roomFor). Its own waiting VMs count only as far as that room reaches; counting them as
   * held would let a pool whose VMs wait be given ever more jobs. A template or class that does not
   * resolve leaves no room (its VMs could not be placed).
   */
  capacityForPool(pool: { readonly metadata: { readonly namespace?: string | undefined; readonly name?: string | undefined }; readonly spec: { readonly templateName: string } }): number {
    const key = `${pool.metadata.namespace ?? ""}/${pool.metadata.name ?? ""}`;
    const snapshot = this.#roomSnapshot();
    const known = snapshot.capacity.get(key);
    if (known !== undefined) return known;
    // Counted in the same look as the room: a VM placed since would otherwise count twice, as
    // placed now and as the room it had then (a fault case saw capacity 4 on room for 2).
    const placed = snapshot.placed.get(key) ?? 0;
    const asVm = { metadata: { namespace: pool.metadata.namespace ?? "", labels: { [LABELS.pool]: pool.metadata.name ?? "" } }, spec: { templateRef: { name: pool.spec.templateName } } } as unknown as DeepReadonly<ImpVM>;
    const resolved = resolveRequest(asVm, this.#lookups);
    let capacity = placed;
    if (resolved.ok) {
      // Every waiting VM was placed once for all pools; this pool's own take their room back.
      const rooms = snapshot.rooms.map((r) => ({ ...r }));
      snapshot.waiting.forEach((w, i) => {
        const on = snapshot.placements[i];
        const room = on === undefined || w.pool !== key ? undefined : rooms.find((r) => r.name === on);
        if (room !== undefined) room.used = add(room.used, w.request, -1);
      });
      capacity += copiesIn(rooms, resolved.request);
    }
    snapshot.capacity.set(key, capacity);
    return capacity;
  }

  /** Room may have changed (the operator's VM and node handlers say so): the next capacity looks again. */
  roomChanged(): void {
    this.#snapshot = undefined;
  }

  /**
   * The cluster as room is counted, kept until room changes or for ROOM_SNAPSHOT_MS: every
   * scale-set listener asks at once, and one look at the nodes (each record read once, every
   * waiting VM placed once) serves them all. Waiting VMs are the pending ones without a reservation
   * (a reserved one is already in its node's record), oldest first.
   */
  #roomSnapshot(): RoomSnapshot {
    const now = this.#clock.now();
    if (this.#snapshot !== undefined && now - this.#snapshot.at < ROOM_SNAPSHOT_MS) return this.#snapshot;
    const cluster = this.#cluster();
    const reserved = new Set<string>();
    for (const node of cluster.nodes) {
      const parsed = parseReservations(node);
      if (parsed.ok) for (const uid of Object.keys(parsed.record)) reserved.add(uid);
    }
    const placed = new Map<string, number>();
    for (const vm of this.#o.vmInformer.list()) {
      const pool = vm.metadata.labels?.[LABELS.pool];
      if (pool === undefined || isTerminalVM(vm) || vm.metadata.deletionTimestamp !== undefined) continue;
      if (vm.status?.nodeName === undefined && !reserved.has(vm.metadata.uid)) continue;
      const key = `${vm.metadata.namespace ?? ""}/${pool}`;
      placed.set(key, (placed.get(key) ?? 0) + 1);
    }
    const waiting: Array<RoomSnapshot["waiting"][number]> = [];
    const pending = this.#pendingKeys().map((key) => this.#o.vmInformer.get(key)).filter((vm): vm is Cached<ImpVM> => vm !== undefined && !reserved.has(vm.metadata.uid));
    pending.sort((a, b) => (a.metadata.creationTimestamp ?? "").localeCompare(b.metadata.creationTimestamp ?? ""));
    for (const vm of pending) {
      const r = resolveRequest(vm, this.#lookups);
      if (r.ok) waiting.push({ pool: `${vm.metadata.namespace ?? ""}/${vm.metadata.labels?.[LABELS.pool] ?? ""}`, request: r.request, uid: vm.metadata.uid });
    }
    const rooms = nodeRooms(cluster);
    const placements = placeWaiting(rooms, waiting);
    this.#snapshot = { at: now, rooms, placed, waiting, placements, capacity: new Map() };
    return this.#snapshot;
  }

  async #place(ctx: ReconcileContext): Promise<ReconcileResult> {
    const vm = this.#o.vmInformer.get(ctx.key);
    if (vm === undefined || !isPendingUnbound(vm)) {
      this.#unschedulableAttempts.delete(ctx.key);
      // Finishes step 3 of a bind whose label write failed; the cache says whether there is anything to do.
      const nodeName = vm?.status?.nodeName;
      if (vm !== undefined && nodeName !== undefined && !isTerminalVM(vm) && vm.metadata.labels?.[LABELS.node] !== nodeName) await labelVm(this.#o.vms, vm, nodeName, ctx.signal);
      return done;
    }
    const resolved = resolveRequest(vm, this.#lookups);
    if (!resolved.ok) return this.#unschedulable(ctx, vm, `Cannot work out what the VM needs: ${resolved.message}`);
    const request = resolved.request;

    const cluster = this.#cluster();
    const placement = decidePlacement({ ...cluster, vmUid: vm.metadata.uid, request, pinnedNode: vm.spec.nodeName });
    if (placement.kind === "unschedulable") return this.#unschedulable(ctx, vm, placement.message);
    const bound = cluster.bound;

    const { nodeName } = placement;
    if (!placement.rollForward) {
      const reserved = await reserve(this.#o.nodes, { nodeName, vm, request, bound: bound.get(nodeName) ?? [], signal: ctx.signal, cachedNode: this.#o.nodeInformer.get(nodeName) });
      if (reserved.outcome === "noFit" || reserved.outcome === "unreadable") {
        // The cache was behind the node's record (another bind got there first): decide again at once.
        throw conflictError("ReservationRefused", `Cannot reserve ${describeRequest(request)} on node ${nodeName} for ImpVM ${ctx.key}: ${reserved.detail}`);
      }
    }
    // The node's record holds the reservation, the VM is not bound yet: a crash here leaves a reservation to prune.
    await (this.#o.faults ?? NO_FAULTS).hit("scheduler.before-bind", ctx.signal);
    const { outcome, stored } = await bindVm(this.#o.vms, { vm, nodeName, nowMs: this.#clock.now(), signal: ctx.signal });
    if (outcome === "bound" || outcome === "alreadyBound") {
      this.#unschedulableAttempts.delete(ctx.key);
      if (outcome === "bound") ctx.logger.info({ node: nodeName, rollForward: placement.rollForward }, "bound VM to node");
      // The label and the Event depend on nothing but the bind: side by side, a bind costs one round trip less.
      await Promise.all([
        labelVm(this.#o.vms, vm, nodeName, ctx.signal, stored),
        outcome === "bound" ? this.#o.recorder?.record(vm, { type: "Normal", reason: "Scheduled", message: `Bound to node ${nodeName} (${describeRequest(request)})`, signal: ctx.signal }) : undefined,
      ]);
      return done;
    }
    // The VM can never be bound to this node now (see bind-protocol.ts): give the room back.
    await release(this.#o.nodes, nodeName, [vm.metadata.uid], ctx.signal);
    return done;
  }

  async #unschedulable(ctx: ReconcileContext, vm: Cached<ImpVM>, message: string): Promise<ReconcileResult> {
    const attempts = (this.#unschedulableAttempts.get(ctx.key) ?? 0) + 1;
    this.#unschedulableAttempts.set(ctx.key, attempts);
    // One event per new reason, not per retry: retries of an unchanged situation would only bump its count.
    const changed = await markUnschedulable(this.#o.vms, { vm, message, nowMs: this.#clock.now(), signal: ctx.signal });
    if (changed) await this.#o.recorder?.record(vm, { type: "Warning", reason: "FailedScheduling", message, signal: ctx.signal });
    return requeueAfter(backoffDelay(UNSCHEDULABLE_RETRY, attempts));
  }

  async #prune(ctx: ReconcileContext): Promise<ReconcileResult> {
    const nodeName = ctx.key;
    const node = this.#o.nodeInformer.get(nodeName);
    if (node === undefined) return done;
    const parsed = parseReservations(node);
    if (!parsed.ok) {
      ctx.logger.warn({ node: nodeName, problem: parsed.message }, "reservation record unreadable; the node takes no VMs until it is fixed");
      return done;
    }
    const releasable: string[] = [];
    for (const [uid, r] of Object.entries(parsed.record)) {
      let fate: ReservedVmFate = fateOf(this.#o.vmInformer.byIndex(VMS_BY_UID, uid)[0], uid, nodeName);
      if (fate === "unknown") fate = await this.#confirmFate(uid, r.namespace, r.name, nodeName, ctx.signal);
      if (RELEASABLE.has(fate)) releasable.push(uid);
    }
    await release(this.#o.nodes, nodeName, releasable, ctx.signal);
    if (releasable.length > 0) ctx.logger.debug({ node: nodeName, released: releasable.length }, "released reservations");
    return Object.keys(parsed.record).length > releasable.length ? requeueAfter(RESERVATION_RECHECK_MS) : done;
  }

  /** Not in the cache: only the API can say whether it is gone (404 or another uid) or just not seen yet. */
  async #confirmFate(uid: string, namespace: string, name: string, nodeName: string, signal: AbortSignal): Promise<ReservedVmFate> {
    try {
      const vm = await this.#o.vms.get({ namespace, name }, signal);
      return vm.metadata.uid === uid ? fateOf(vm, uid, nodeName) : "gone";
    } catch (err) {
      if (isNotFound(err)) return "gone";
      throw err;
    }
  }
}

/** Room may have appeared: capacity, cordon, facts or setup key changed, or the record shrank. */
export function nodeMayHaveRoom(old: Cached<ImpNode>, obj: Cached<ImpNode>): boolean {
  const facts = (n: Cached<ImpNode>): string =>
    JSON.stringify([n.spec?.unschedulable, n.status?.capacity, n.status?.arch, n.status?.kernels, n.status?.setupKey?.keyId]);
  if (facts(old) !== facts(obj)) return true;
  const count = (n: Cached<ImpNode>): number => {
    const p = parseReservations(n);
    return p.ok ? Object.keys(p.record).length : Infinity;
  };
  return count(obj) < count(old);
}
