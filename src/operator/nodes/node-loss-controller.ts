/**
 * Marks the VMs of lost nodes Failed/NodeLost (decide-node-loss.ts decides). Keyed by node name;
 * any node that has bound VMs, an ImpNode or an agent Lease is looked at. Before failing anything it
 * reads the Lease from the API itself, so a cache that stopped hearing renewals (a broken watch)
 * cannot make a live node look lost. A lost node's agent cannot remove the VMs' sealed material
 * (setup, Secret inputs) from their status, so this controller does (I4: nothing sealed outlives its
 * VM's run): for the VMs it fails, and for VMs that ended there but still hold it. It is
 * level-triggered on that status, so a crash between the two writes is mended on the next pass.
 * Registration removal for those VMs is the pool controller's (it reacts to terminal VMs). When the
 * lost machine has no Node in the cluster any more, nothing will ever run its agent's teardown, so
 * this controller takes the agent's finalizer off the ended VMs (decide-node-loss.ts says why).
 */
import type { Registry } from "prom-client";
import { FINALIZERS, holdsSealed, VM_REASONS, withoutSealed, type ImpNode, type ImpVM } from "../../api/index.ts";
import {
  Controller,
  done,
  hasFinalizer,
  isNotFound,
  mutateWithRetry,
  removeFinalizer,
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
import { silentLogger, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import { agentLeaseName, nodeOfLease } from "../scheduler/agent-lease.ts";
import { addVmIndexes, isTerminalVM, VMS_BY_NODE } from "../scheduler/indexes.ts";
import { KubeNodeTracker } from "../scheduler/kube-nodes.ts";
import { DEFAULT_AGENT_RESTART_GRACE_MS, DEFAULT_NODE_LOST_AFTER_MS, decideNodeLoss, machineGone } from "./decide-node-loss.ts";

export interface NodeLossControllerOptions {
  readonly vms: ResourceClient<ImpVM>;
  readonly leases: Pick<ResourceClient<Lease>, "get">;
  readonly vmInformer: Informer<ImpVM>;
  readonly nodeInformer: Informer<ImpNode>;
  readonly leaseInformer: Informer<Lease>;
  readonly leaseNamespace: string;
  /** core/v1 Nodes (share it with the scheduler). Omit where the cluster has none for Imp's nodes (the dev cluster): deletion is then never a signal. */
  readonly kubeNodes?: KubeNodeTracker | undefined;
  /** A Lease older than this past its renewTime means the node is lost (default 40 s). */
  readonly lostAfterMs?: number | undefined;
  /** More time while the node's Node is Ready (decide-node-loss.ts); default {@link DEFAULT_AGENT_RESTART_GRACE_MS}. */
  readonly agentRestartGraceMs?: number | undefined;
  readonly registry: Registry;
  readonly recorder?: EventRecorder;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /** Default "node-loss". */
  readonly name?: string;
}

export class NodeLossController {
  readonly #o: NodeLossControllerOptions;
  readonly #clock: Clock;
  readonly #controller: Controller;
  readonly #lostAfterMs: number;
  readonly #agentRestartGraceMs: number;
  readonly #leaseMissingSince = new Map<string, number>();
  readonly #kubeNodes: KubeNodeTracker;
  /** When start() was called: no node is lost sooner than the bound after it (decide-node-loss.ts says why). */
  #watchingSinceMs: number;

  constructor(options: NodeLossControllerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#lostAfterMs = options.lostAfterMs ?? DEFAULT_NODE_LOST_AFTER_MS;
    this.#agentRestartGraceMs = options.agentRestartGraceMs ?? DEFAULT_AGENT_RESTART_GRACE_MS;
    this.#watchingSinceMs = this.#clock.now();
    const logger = (options.logger ?? silentLogger).child({ part: "node-loss" });
    addVmIndexes(options.vmInformer);
    this.#controller = new Controller({ name: options.name ?? "node-loss", registry: options.registry, clock: this.#clock, logger, workers: 1, reconcile: (ctx) => this.#reconcile(ctx) });
    this.#controller.watch(options.vmInformer, { toKeys: (vm) => (vm.status?.nodeName === undefined || (isTerminalVM(vm) && !holdsSealed(vm.status) && !this.#awaitsGoneMachine(vm)) ? [] : [vm.status.nodeName]) });
    this.#controller.watch(options.nodeInformer);
    this.#controller.watch(options.leaseInformer, { toKeys: (lease) => { const n = nodeOfLease(lease); return n === undefined ? [] : [n]; } });
    this.#kubeNodes = options.kubeNodes ?? new KubeNodeTracker();
    this.#kubeNodes.onDeleted((name) => this.#controller.enqueue(name));
    this.#kubeNodes.onReadyChanged((name) => this.#controller.enqueue(name));
  }

  async start(signal: AbortSignal): Promise<void> {
    this.#watchingSinceMs = this.#clock.now();
    await this.#controller.start(signal);
  }

  #decide(nodeName: string, lease: DeepReadonly<Lease> | undefined): ReturnType<typeof decideNodeLoss> {
    const now = this.#clock.now();
    if (lease === undefined) {
      if (!this.#leaseMissingSince.has(nodeName)) this.#leaseMissingSince.set(nodeName, now);
    } else this.#leaseMissingSince.delete(nodeName);
    return decideNodeLoss({ nodeName, lease, leaseMissingSinceMs: this.#leaseMissingSince.get(nodeName), kubeNode: this.#kubeNodes.state(nodeName), kubeNodeReady: this.#kubeNodes.isReady(nodeName), nowMs: now, watchingSinceMs: this.#watchingSinceMs, lostAfterMs: this.#lostAfterMs, agentRestartGraceMs: this.#agentRestartGraceMs });
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const nodeName = ctx.key;
    const onNode = (): Cached<ImpVM>[] => this.#o.vmInformer.byIndex(VMS_BY_NODE, nodeName);
    const victims = (): Cached<ImpVM>[] => onNode().filter((vm) => !isTerminalVM(vm));
    const endedSealed = (): Cached<ImpVM>[] => onNode().filter((vm) => isTerminalVM(vm) && holdsSealed(vm.status));
    const awaitingTeardown = (): Cached<ImpVM>[] => onNode().filter((vm) => this.#awaitsGoneMachine(vm));
    if (victims().length === 0 && endedSealed().length === 0 && awaitingTeardown().length === 0) {
      this.#leaseMissingSince.delete(nodeName);
      return done;
    }
    const leaseRef = { namespace: this.#o.leaseNamespace, name: agentLeaseName(nodeName) };
    const cached = this.#decide(nodeName, this.#o.leaseInformer.get(`${leaseRef.namespace}/${leaseRef.name}`));
    if (!cached.lost) return requeueAfter(cached.recheckInMs + 1);
    // Confirm against the API before failing VMs: the cache may simply have stopped hearing renewals.
    let live: Lease | undefined;
    try {
      live = await this.#o.leases.get(leaseRef, ctx.signal);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const decision = this.#decide(nodeName, live);
    if (!decision.lost) return requeueAfter(decision.recheckInMs + 1);
    for (const vm of victims()) if (await this.#failVm(ctx, vm, decision.message)) await this.#removeSealed(ctx, vm);
    for (const vm of endedSealed()) await this.#removeSealed(ctx, vm);
    if (decision.machineGone) for (const vm of awaitingTeardown()) await this.#releaseTeardown(ctx, vm);
    return done;
  }

  /** An ended VM still held by its agent's teardown finalizer, on a node whose machine has no Node: only a lost node's may be released. */
  #awaitsGoneMachine(vm: DeepReadonly<ImpVM>): boolean {
    const node = vm.status?.nodeName;
    if (node === undefined || !isTerminalVM(vm) || !hasFinalizer(vm, FINALIZERS.vmTeardown)) return false;
    return machineGone(this.#kubeNodes.state(node));
  }

  /** What the agent does last at release, done for it: the VM object may go (its pool deletes ended VMs). */
  async #releaseTeardown(ctx: ReconcileContext, vm: Cached<ImpVM>): Promise<void> {
    // The same VM (not one reusing its name), still ended, still on the lost node.
    const same = (d: ImpVM): boolean => d.metadata.uid === vm.metadata.uid && isTerminalVM(d) && d.status?.nodeName === ctx.key;
    if (await removeFinalizer(this.#o.vms, { namespace: vm.metadata.namespace ?? "", name: vm.metadata.name }, FINALIZERS.vmTeardown, ctx.signal, same)) {
      ctx.logger.info({ vm: `${vm.metadata.namespace}/${vm.metadata.name}`, node: ctx.key }, "node lost and its machine has no Node: the agent's teardown finalizer removed");
    }
  }

  /** As the agent does at release: the sealed setup and inputs leave the status, the setup is recorded Deleted. */
  async #removeSealed(ctx: ReconcileContext, vm: Cached<ImpVM>): Promise<void> {
    const namespace = vm.metadata.namespace ?? "";
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace, name: vm.metadata.name },
      subresource: "status",
      signal: ctx.signal,
      mutate: (d) => {
        const next = d.metadata.uid === vm.metadata.uid ? withoutSealed(d.status) : undefined;
        if (next === undefined) return false;
        d.status = next;
      },
    }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    ctx.logger.info({ vm: `${namespace}/${vm.metadata.name}` }, "node lost: the VM's sealed setup and inputs removed");
  }

  /** Returns whether this call failed the VM (false: it had ended, moved or gone meanwhile). */
  async #failVm(ctx: ReconcileContext, vm: Cached<ImpVM>, message: string): Promise<boolean> {
    const now = new Date(this.#clock.now()).toISOString();
    let failed = false;
    try {
      await mutateWithRetry(this.#o.vms, {
        ref: { namespace: vm.metadata.namespace ?? "", name: vm.metadata.name },
        subresource: "status",
        signal: ctx.signal,
        mutate: (draft) => {
          failed = false; // mutate may run again after a conflict: only the attempt that writes counts
          if (draft.metadata.uid !== vm.metadata.uid || isTerminalVM(draft) || draft.status?.nodeName !== vm.status?.nodeName) return false;
          draft.status = {
            ...draft.status,
            phase: "Failed",
            reason: VM_REASONS.NodeLost,
            message,
            phaseTimestamps: { ...draft.status?.phaseTimestamps, failed: now },
          };
          failed = true;
        },
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (!failed) return false;
    ctx.logger.warn({ vm: `${vm.metadata.namespace}/${vm.metadata.name}`, node: ctx.key }, "node lost: VM marked Failed");
    await this.#o.recorder?.record(vm, { type: "Warning", reason: VM_REASONS.NodeLost, message, signal: ctx.signal });
    return true;
  }
}
