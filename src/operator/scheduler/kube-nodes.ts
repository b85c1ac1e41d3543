/**
 * What the operator knows of core/v1 Nodes, for node loss and for placement alike: a Node this
 * process saw that is gone was deleted (a machine removed from the cluster); a Node with
 * `spec.unschedulable` was cordoned (`kubectl cordon`/`drain`), so no new VM is placed there; a node
 * that never had a Node object (the dev cluster has no kubelets) is `never`: no sign of loss by
 * itself, but once its agent is lost too, no machine of that name is left to tear its VMs down
 * (decide-node-loss.ts). One tracker, so the scheduler never binds a VM to a node that node loss
 * would fail at once.
 */
import type { Informer, KubeObject } from "../../kube/index.ts";

/** `unwatched` when Node watching is off (dev clusters have no Nodes) or has not yet listed them all. */
export type KubeNodeState = "present" | "deleted" | "never" | "unwatched";

export class KubeNodeTracker {
  readonly #informer: Informer<KubeObject> | undefined;
  readonly #seen = new Set<string>();
  readonly #onDeleted: Array<(name: string) => void> = [];
  readonly #onCordonChanged: Array<(name: string, cordoned: boolean) => void> = [];
  readonly #onReadyChanged: Array<(name: string) => void> = [];

  /** Without an informer every node is `unwatched`. */
  constructor(informer?: Informer<KubeObject>) {
    this.#informer = informer;
    informer?.addEventHandler({
      onAdd: (n) => this.#seen.add(n.metadata.name),
      onUpdate: (old, n) => {
        this.#seen.add(n.metadata.name);
        if (isCordoned(old) !== isCordoned(n)) for (const f of this.#onCordonChanged) f(n.metadata.name, isCordoned(n));
        if (isReady(old) !== isReady(n)) for (const f of this.#onReadyChanged) f(n.metadata.name);
      },
      onDelete: (n) => {
        const name = n.metadata.name;
        this.#seen.add(name);
        for (const f of this.#onDeleted) f(name);
      },
    });
  }

  state(nodeName: string): KubeNodeState {
    if (this.#informer === undefined) return "unwatched";
    if (this.#informer.get(nodeName) !== undefined) return "present";
    // Before the first full list, absence says nothing.
    if (!this.#informer.hasSynced()) return "unwatched";
    return this.#seen.has(nodeName) ? "deleted" : "never";
  }

  /**
   * Whether the machine's Node is `Ready=True`: its kubelet heartbeats, as the node lifecycle
   * controller judges (it turns the condition Unknown once they stop). False when not watched.
   */
  isReady(nodeName: string): boolean {
    return isReady(this.#informer?.get(nodeName));
  }

  /** Those of `names` whose Node was deleted. */
  deletedAmong(names: Iterable<string>): ReadonlySet<string> {
    return new Set([...names].filter((n) => this.state(n) === "deleted"));
  }

  /** Those of `names` whose Node is cordoned (`spec.unschedulable`). */
  cordonedAmong(names: Iterable<string>): ReadonlySet<string> {
    const informer = this.#informer;
    if (informer === undefined) return new Set();
    return new Set([...names].filter((n) => isCordoned(informer.get(n))));
  }

  onDeleted(f: (name: string) => void): void {
    this.#onDeleted.push(f);
  }

  /** Called when a Node's Ready condition turns True or stops being True. */
  onReadyChanged(f: (name: string) => void): void {
    this.#onReadyChanged.push(f);
  }

  /** Called when a Node is cordoned (`kubectl cordon`, `drain`) or uncordoned. */
  onCordonChanged(f: (name: string, cordoned: boolean) => void): void {
    this.#onCordonChanged.push(f);
  }
}

/** A node is cordoned when its ImpNode says so (`spec.unschedulable`) or its core Node does (`kubectl cordon`). One rule for the pools and the drain. */
export function nodeCordoned(impNode: { readonly spec?: { readonly unschedulable?: boolean } | undefined } | undefined, name: string, kubeNodes: KubeNodeTracker | undefined): boolean {
  return impNode?.spec?.unschedulable === true || (kubeNodes?.cordonedAmong([name]).has(name) ?? false);
}

function isCordoned(node: unknown): boolean {
  return (node as { spec?: { unschedulable?: boolean } } | undefined)?.spec?.unschedulable === true;
}

function isReady(node: unknown): boolean {
  const conditions = (node as { status?: { conditions?: ReadonlyArray<{ type?: string; status?: string }> } } | undefined)?.status?.conditions;
  return conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}
