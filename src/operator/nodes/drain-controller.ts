/**
 * Drains cordoned nodes (decide-drain.ts decides; one key per node). It records when a drain
 * started and when it ended on the ImpNode (annotations `imp.dev/drain-started`, `imp.dev/drained`,
 * an Event each), marks a VM whose job ran past its pool's `drainGracePeriod` Failed/Drained (its
 * agent stops it, its pool replaces it), and forgets both marks on uncordon. Placement (no new VM on
 * a cordoned node) is the scheduler's, and replacing idle runners the pools'.
 */
import type { Registry } from "prom-client";
import { ANNOTATIONS, LABELS, parseDurationMs, VM_REASONS, type ImpNode, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import { Controller, done, isNotFound, mutateWithRetry, requeueAfter, type Cached, type EventRecorder, type Informer, type ReconcileContext, type ReconcileResult, type ResourceClient } from "../../kube/index.ts";
import { silentLogger, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import { addVmIndexes, isTerminalVM, VMS_BY_NODE } from "../scheduler/indexes.ts";
import { nodeCordoned, type KubeNodeTracker } from "../scheduler/kube-nodes.ts";
import { decideDrain, DEFAULT_DRAIN_GRACE_MS, type DrainAction, type DrainVm } from "./decide-drain.ts";

export interface DrainControllerOptions {
  readonly vms: ResourceClient<ImpVM>;
  readonly nodes: Pick<ResourceClient<ImpNode>, "patch">;
  readonly vmInformer: Informer<ImpVM>;
  readonly nodeInformer: Informer<ImpNode>;
  readonly poolInformer: Informer<ImpVMRunnerPool>;
  /** core/v1 Nodes: `kubectl cordon` sets their spec.unschedulable. Omit where there are none (dev cluster). */
  readonly kubeNodes?: KubeNodeTracker | undefined;
  readonly registry: Registry;
  readonly recorder?: EventRecorder;
  readonly clock?: Clock;
  readonly logger?: Logger;
}

const msOf = (iso: string | undefined): number | undefined => {
  const ms = iso === undefined ? Number.NaN : Date.parse(iso);
  return Number.isFinite(ms) ? ms : undefined;
};

export class DrainController {
  readonly #o: DrainControllerOptions;
  readonly #clock: Clock;
  readonly #controller: Controller;

  constructor(options: DrainControllerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    addVmIndexes(options.vmInformer);
    this.#controller = new Controller({ name: "node-drain", registry: options.registry, clock: this.#clock, logger: (options.logger ?? silentLogger).child({ part: "node-drain" }), workers: 1, reconcile: (ctx) => this.#reconcile(ctx) });
    this.#controller.watch(options.nodeInformer, {
      updateMatters: (old, n) => old.spec?.unschedulable !== n.spec?.unschedulable || old.metadata.annotations?.[ANNOTATIONS.drainStarted] !== n.metadata.annotations?.[ANNOTATIONS.drainStarted],
    });
    // A VM on a node that ends (or goes) may leave the node drained.
    this.#controller.watch(options.vmInformer, { toKeys: (vm) => (vm.status?.nodeName === undefined ? [] : [vm.status.nodeName]), updateMatters: (old, vm) => isTerminalVM(old) !== isTerminalVM(vm) || old.metadata.deletionTimestamp !== vm.metadata.deletionTimestamp });
    options.kubeNodes?.onCordonChanged((name) => this.#controller.enqueue(name));
  }

  async start(signal: AbortSignal): Promise<void> {
    await this.#controller.start(signal);
  }

  #graceMs(vm: Cached<ImpVM>): number {
    const poolName = vm.metadata.labels?.[LABELS.pool];
    const pool = poolName === undefined ? undefined : this.#o.poolInformer.get(`${vm.metadata.namespace ?? ""}/${poolName}`);
    const grace = pool?.spec.drainGracePeriod;
    return grace === undefined ? DEFAULT_DRAIN_GRACE_MS : parseDurationMs(grace);
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const node = this.#o.nodeInformer.get(ctx.key);
    if (node === undefined) return done;
    const annotations = node.metadata.annotations ?? {};
    const vms: DrainVm[] = this.#o.vmInformer.byIndex(VMS_BY_NODE, ctx.key).map((vm) => ({
      namespace: vm.metadata.namespace ?? "",
      name: vm.metadata.name,
      uid: vm.metadata.uid,
      live: !isTerminalVM(vm) && vm.metadata.deletionTimestamp === undefined,
      graceMs: this.#graceMs(vm),
    }));
    const decision = decideDrain({ cordoned: nodeCordoned(node, node.metadata.name, this.#o.kubeNodes), startedAtMs: msOf(annotations[ANNOTATIONS.drainStarted]), drainedAtMs: msOf(annotations[ANNOTATIONS.drained]), vms, nowMs: this.#clock.now() });
    for (const action of decision.actions) await this.#act(ctx, node, action);
    return decision.recheckInMs === undefined ? done : requeueAfter(decision.recheckInMs + 1);
  }

  async #act(ctx: ReconcileContext, node: Cached<ImpNode>, action: DrainAction): Promise<void> {
    const name = node.metadata.name;
    const annotate = (annotations: Record<string, string | null>): Promise<unknown> => this.#o.nodes.patch({ name }, { metadata: { annotations } }, ctx.signal).catch((err: unknown) => (isNotFound(err) ? undefined : Promise.reject(err)));
    const iso = (ms: number): string => new Date(ms).toISOString();
    switch (action.type) {
      case "MarkStarted":
        await annotate({ [ANNOTATIONS.drainStarted]: iso(action.atMs) });
        await this.#o.recorder?.record(node, { type: "Normal", reason: "DrainStarted", message: `Node ${name} is cordoned: no new VM is placed here, idle runners are replaced elsewhere, running jobs finish within their pool's drain grace`, signal: ctx.signal });
        return;
      case "MarkDrained":
        await annotate({ [ANNOTATIONS.drained]: iso(action.atMs) });
        await this.#o.recorder?.record(node, { type: "Normal", reason: "Drained", message: `Node ${name} is drained: no VM of Imp runs here`, signal: ctx.signal });
        return;
      case "ClearMarks":
        await annotate({ [ANNOTATIONS.drainStarted]: null, [ANNOTATIONS.drained]: null });
        await this.#o.recorder?.record(node, { type: "Normal", reason: "Uncordoned", message: `Node ${name} takes VMs again`, signal: ctx.signal });
        return;
      case "EndVm":
        await this.#endVm(ctx, action.vm, `Node ${name}: ${action.message}`);
        return;
    }
  }

  async #endVm(ctx: ReconcileContext, vm: DrainVm, message: string): Promise<void> {
    let ended = false;
    await mutateWithRetry(this.#o.vms, {
      ref: { namespace: vm.namespace, name: vm.name },
      subresource: "status",
      signal: ctx.signal,
      mutate: (draft) => {
        ended = false;
        if (draft.metadata.uid !== vm.uid || isTerminalVM(draft) || draft.status?.nodeName !== ctx.key) return false;
        draft.status = { ...draft.status, phase: "Failed", reason: VM_REASONS.Drained, message, phaseTimestamps: { ...draft.status?.phaseTimestamps, failed: new Date(this.#clock.now()).toISOString() } };
        ended = true;
      },
    }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    if (!ended) return;
    ctx.logger.info({ vm: `${vm.namespace}/${vm.name}`, node: ctx.key }, "drain grace passed: VM marked Failed/Drained");
    const seen = this.#o.vmInformer.get(`${vm.namespace}/${vm.name}`);
    if (seen !== undefined) await this.#o.recorder?.record(seen, { type: "Warning", reason: VM_REASONS.Drained, message, signal: ctx.signal });
  }
}
