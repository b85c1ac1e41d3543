/**
 * `imp decommission`: what the Helm chart's pre-delete hook runs before `helm uninstall` removes the
 * operator and the agents, so that nothing of Imp keeps running, stays registered or stays on a node.
 *
 * While both still run: every pool is deleted (the operator deregisters its runners and removes its
 * scale set, as for any deleted pool) and every VM with it (the agents tear them down; running jobs
 * are cancelled), and the hook waits until none is left. Then each ImpNode is annotated; its agent,
 * once it holds no VM, removes its state directory (unless asked to keep it), its Lease and its
 * ImpNode (the agent's side: src/agent/node/decide-decommission.ts). ImpNodes whose agent does not
 * answer in time (a dead node) are deleted here, with their Leases, and named in the report.
 */
import { ANNOTATIONS, LABELS, type ImpNode, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import { isNotFound, type Lease, type ResourceClient } from "../../kube/index.ts";
import { retryableError, type Clock, type Logger } from "../../shared/index.ts";

export interface DecommissionOptions {
  readonly pools: ResourceClient<ImpVMRunnerPool>;
  readonly vms: ResourceClient<ImpVM>;
  readonly nodes: ResourceClient<ImpNode>;
  readonly leases: ResourceClient<Lease>;
  /** Where the agents' Leases live (the release namespace). */
  readonly leaseNamespace: string;
  /** Pools and VMs of this namespace only; undefined = every namespace. */
  readonly namespace?: string;
  /** Agents keep their state directory (image cache, setup key) for a later install. */
  readonly keepNodeState: boolean;
  /** How long pools and VMs may take to go; then the hook fails, naming what is left. */
  readonly vmTimeoutMs: number;
  /** How long agents may take to retire their node; then their ImpNodes are deleted here. */
  readonly nodeTimeoutMs: number;
  readonly pollIntervalMs?: number;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly signal?: AbortSignal;
}

export interface DecommissionReport {
  readonly poolsDeleted: number;
  readonly vmsDeleted: number;
  /** Nodes whose agent removed its state (or kept it, as asked), Lease and ImpNode itself. */
  readonly nodesRetired: readonly string[];
  /** Nodes whose agent did not answer in time: their ImpNode and Lease were deleted here; their state directory may remain. */
  readonly nodesForced: readonly string[];
  readonly vmsGoneMs: number;
  readonly nodesGoneMs: number;
}

const DEFAULT_POLL_MS = 1_000;

export async function decommission(o: DecommissionOptions): Promise<DecommissionReport> {
  const { clock, logger, signal } = o;
  const withSignal = signal === undefined ? {} : { signal };
  const scope = { ...(o.namespace === undefined ? {} : { namespace: o.namespace }), ...withSignal };
  const deleted = (err: unknown): void => {
    if (!isNotFound(err)) throw err;
  };
  const started = clock.now();

  const pools = (await o.pools.list(scope)).items;
  for (const pool of pools) await o.pools.delete({ namespace: pool.metadata.namespace, name: pool.metadata.name }, { propagationPolicy: "Background", ...scope }).catch(deleted);
  const vms = (await o.vms.list(scope)).items.filter((vm) => vm.metadata.deletionTimestamp === undefined);
  for (const vm of vms) await o.vms.delete({ namespace: vm.metadata.namespace, name: vm.metadata.name }, scope).catch(deleted);
  logger.info({ pools: pools.length, vms: vms.length }, "deleted every pool and VM; waiting for them to go");

  const left = await pollUntil(o, o.vmTimeoutMs, async () => {
    const [p, v] = await Promise.all([o.pools.list(scope), o.vms.list(scope)]);
    return [...p.items.map((x) => `ImpVMRunnerPool ${x.metadata.namespace ?? ""}/${x.metadata.name}`), ...v.items.map((x) => `ImpVM ${x.metadata.namespace ?? ""}/${x.metadata.name} (${x.status?.phase ?? "no phase"})`)];
  });
  if (left.length > 0) {
    throw retryableError("DecommissionTimedOut", `Cannot uninstall Imp yet: after ${o.vmTimeoutMs / 1000} s these are still being torn down: ${left.slice(0, 10).join(", ")}${left.length > 10 ? ` and ${left.length - 10} more` : ""}. The operator and agents must still run to end them; uninstall again, or raise uninstall.vmTimeoutSeconds and helm's --timeout`);
  }
  const vmsGoneMs = clock.now() - started;

  // Whole seconds, as the API server writes times; an agent started within that second still counts it.
  const askedAt = new Date(Math.floor(clock.now() / 1000) * 1000).toISOString().replace(/\.000Z$/, "Z");
  const nodes = (await o.nodes.list(withSignal)).items;
  const annotations = { [ANNOTATIONS.decommission]: askedAt, [ANNOTATIONS.decommissionKeepState]: o.keepNodeState ? "true" : null };
  for (const node of nodes) await o.nodes.patch({ name: node.metadata.name }, { metadata: { annotations } }, signal).catch(deleted);
  logger.info({ nodes: nodes.map((n) => n.metadata.name), keepNodeState: o.keepNodeState }, "asked every node's agent to retire");

  const nodesStarted = clock.now();
  const stayed = await pollUntil(o, o.nodeTimeoutMs, async () => (await o.nodes.list(withSignal)).items.map((n) => n.metadata.name));
  for (const name of stayed) {
    logger.warn({ node: name }, "the node's agent did not retire it in time: its ImpNode and Lease are deleted here; its state directory may remain on the node");
    await o.nodes.delete({ name }, withSignal).catch(deleted);
  }
  // Leftover agent Leases (a dead node's, or one whose agent was stopped mid-retire).
  const leases = (await o.leases.list({ namespace: o.leaseNamespace, labelSelector: `${LABELS.managedBy}=imp-agent`, ...withSignal })).items;
  for (const lease of leases) await o.leases.delete({ namespace: o.leaseNamespace, name: lease.metadata.name }, withSignal).catch(deleted);
  const report: DecommissionReport = {
    poolsDeleted: pools.length,
    vmsDeleted: vms.length,
    nodesRetired: nodes.map((n) => n.metadata.name).filter((n) => !stayed.includes(n)),
    nodesForced: stayed,
    vmsGoneMs,
    nodesGoneMs: clock.now() - nodesStarted,
  };
  logger.info({ ...report }, "Imp decommissioned");
  return report;
}

/** Polls `remaining` until it is empty or `timeoutMs` has passed on the clock; returns what remained last. */
async function pollUntil(o: DecommissionOptions, timeoutMs: number, remaining: () => Promise<readonly string[]>): Promise<readonly string[]> {
  const deadline = o.clock.now() + timeoutMs;
  for (;;) {
    const left = await remaining();
    if (left.length === 0 || o.clock.now() >= deadline) return left;
    await o.clock.sleep(Math.min(o.pollIntervalMs ?? DEFAULT_POLL_MS, Math.max(1, deadline - o.clock.now())), o.signal);
  }
}
