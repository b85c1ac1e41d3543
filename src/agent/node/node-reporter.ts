/**
 * The node's presence in the API: its ImpNode (what this agent can run, what it holds, its setup
 * key) and its liveness Lease, renewed every few seconds. The scheduler trusts a node only while its
 * Lease is fresh, so a stale ImpNode alone never means a live node.
 */
import { API_VERSION, IMP_NODE, SETUP_SEAL_SUITE, type ImpNode, type ImpNodeStatus, type NodeKeyPair } from "../../api/index.ts";
import { isAlreadyExists, isNotFound, microTime, mutateWithRetry, type Lease, type ResourceClient } from "../../kube/index.ts";
import { describeError, type Clock, type Logger } from "../../shared/index.ts";
import { decommissionRequestOf, type DecommissionRequest } from "./decide-decommission.ts";
import { capacityForJobs } from "./node-room.ts";

/** What the agent did with a decommission request: ignored it (stale), is waiting for its VMs, or has retired the node. */
export type DecommissionOutcome = "ignored" | "waiting" | "retired";

export const DEFAULT_LEASE_DURATION_SECONDS = 40;
export const DEFAULT_RENEW_INTERVAL_MS = 5_000;

export interface NodeFacts {
  readonly arch: "amd64" | "arm64";
  readonly kvm: boolean;
  readonly accel: "kvm" | "tcg";
  readonly kvmReason: string;
  readonly vmms: readonly ("qemu" | "firecracker")[];
  readonly kernels: readonly string[];
  readonly capacity: { readonly vcpu: number; readonly memoryMiB: number; readonly vmSlots: number };
  readonly versions: { readonly agent: string; readonly guestAgent?: string; readonly qemu?: string; readonly firecracker?: string };
}

export interface NodeReporterOptions {
  readonly nodeName: string;
  readonly nodes: ResourceClient<ImpNode>;
  readonly leases: ResourceClient<Lease>;
  readonly leaseNamespace: string;
  readonly facts: NodeFacts;
  readonly key: NodeKeyPair;
  /** What the node's own template VMs (memory snapshots) hold now; reported capacity leaves it out. Default none. */
  readonly heldByTemplates?: () => { readonly vcpu: number; readonly memoryMiB: number; readonly vmSlots: number };
  /** What the node holds now (VMs bound here and not released). */
  readonly allocated: () => { readonly vcpu: number; readonly memoryMiB: number; readonly vmSlots: number };
  readonly imageCache: () => Promise<{ readonly images: number; readonly usedBytes: number; readonly limitBytes?: number }>;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly leaseDurationSeconds?: number;
  readonly renewIntervalMs?: number;
  /**
   * Asked each round while the ImpNode carries a decommission request (an uninstall). "retired":
   * the node is clean; the reporter deletes the Lease and the ImpNode and reports no more.
   */
  readonly decommission?: (request: DecommissionRequest) => Promise<DecommissionOutcome>;
}

export const leaseNameOf = (nodeName: string): string => `imp-agent-${nodeName}`;

export class NodeReporter {
  readonly #o: NodeReporterOptions;
  #lastStatus = "";
  #retired = false;

  constructor(options: NodeReporterOptions) {
    this.#o = options;
  }

  /** Renews the Lease and refreshes the ImpNode every interval until `signal` aborts. Errors are logged and retried next round. */
  async start(signal: AbortSignal): Promise<void> {
    const interval = this.#o.renewIntervalMs ?? DEFAULT_RENEW_INTERVAL_MS;
    // A retired reporter stays in the loop, idle: ending would end the agent, and a restarted agent
    // would register the node again in the middle of the uninstall.
    while (!signal.aborted) {
      await this.reportOnce(signal).catch((err: unknown) => this.#o.logger.warn({ error: describeError(err) }, "node report failed; retrying next round"));
      await this.#o.clock.sleep(interval, signal).catch(() => undefined);
    }
  }

  /** True once the node was decommissioned: its ImpNode and Lease are deleted and nothing more is reported. */
  get retired(): boolean {
    return this.#retired;
  }

  async reportOnce(signal?: AbortSignal): Promise<void> {
    if (this.#retired) return;
    if (this.#o.decommission !== undefined && (await this.#decommissionIfAsked(this.#o.decommission, signal))) return;
    await this.renewLease(signal);
    await this.writeStatus(signal);
  }

  /** One GET of the ImpNode a round: the uninstall's request arrives as its annotation. True once retired. */
  async #decommissionIfAsked(decommission: NonNullable<NodeReporterOptions["decommission"]>, signal?: AbortSignal): Promise<boolean> {
    const { nodes, leases, nodeName, leaseNamespace } = this.#o;
    const node = await nodes.get({ name: nodeName }, signal).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    const request = decommissionRequestOf(node?.metadata.annotations);
    if (request === undefined || (await decommission(request)) !== "retired") return false;
    // The Lease first: a node whose Lease is gone gets no new VM, even before the ImpNode goes.
    for (const remove of [() => leases.delete({ namespace: leaseNamespace, name: leaseNameOf(nodeName) }, { ...(signal === undefined ? {} : { signal }) }), () => nodes.delete({ name: nodeName }, { ...(signal === undefined ? {} : { signal }) })]) {
      await remove().catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
    }
    this.#retired = true;
    this.#o.logger.info({ keepState: request.keepState }, "node decommissioned: its Lease and ImpNode are deleted; reporting stops");
    return true;
  }

  status(cache: Awaited<ReturnType<NodeReporterOptions["imageCache"]>>): ImpNodeStatus {
    const f = this.#o.facts;
    return {
      arch: f.arch,
      kvm: f.kvm,
      accel: f.accel,
      kvmReason: f.kvmReason.slice(0, 1024),
      vmms: [...f.vmms],
      kernels: [...f.kernels],
      capacity: this.#o.heldByTemplates === undefined ? { ...f.capacity } : capacityForJobs(f.capacity, this.#o.heldByTemplates()),
      allocated: { ...this.#o.allocated() },
      versions: { ...f.versions },
      imageCache: { images: cache.images, usedBytes: cache.usedBytes, ...(cache.limitBytes === undefined ? {} : { limitBytes: cache.limitBytes }) },
      setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: this.#o.key.keyId, publicKey: this.#o.key.publicKey },
    };
  }

  async writeStatus(signal?: AbortSignal): Promise<void> {
    const { nodes, nodeName } = this.#o;
    const status = this.status(await this.#o.imageCache());
    const text = JSON.stringify(status);
    if (text === this.#lastStatus) return;
    try {
      await nodes.create({ apiVersion: API_VERSION, kind: IMP_NODE.kind, metadata: { name: nodeName, labels: { "app.kubernetes.io/managed-by": "imp-agent" } }, spec: { unschedulable: false } } as ImpNode, signal);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    await mutateWithRetry(nodes, {
      ref: { name: nodeName },
      subresource: "status",
      mutate: (draft) => {
        draft.status = { ...draft.status, ...status };
      },
      ...(signal === undefined ? {} : { signal }),
    });
    this.#lastStatus = text;
  }

  async renewLease(signal?: AbortSignal): Promise<void> {
    const { leases, leaseNamespace, nodeName, clock } = this.#o;
    const name = leaseNameOf(nodeName);
    const spec = { holderIdentity: nodeName, leaseDurationSeconds: this.#o.leaseDurationSeconds ?? DEFAULT_LEASE_DURATION_SECONDS, renewTime: microTime(clock.now()) };
    try {
      await leases.patch({ namespace: leaseNamespace, name }, { spec }, signal);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await leases.create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name, namespace: leaseNamespace, labels: { "app.kubernetes.io/managed-by": "imp-agent", "imp.dev/node": nodeName } }, spec: { ...spec, acquireTime: spec.renewTime } }, signal);
    }
  }
}
