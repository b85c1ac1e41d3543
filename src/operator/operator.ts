/**
 * `imp operator`: builds the whole operator from a kubeconfig and options and runs it. Caches (pools,
 * VMs, ImpNodes, agent Leases, classes, templates, core Nodes) → leader election (a Lease) →
 * controllers (scheduler, node loss, runner pools, runner setup and registration removal) →
 * webhook receiver and scale-set listeners, whose events one fan-out (DemandEvents) hands to the
 * pools' demand and the job observer; a health/metrics server answers from the start.
 * Runs until its signal aborts; rejects on LeadershipLost so the process exits and campaigns anew.
 */
import { hostname } from "node:os";
import type { KubeConfig } from "@kubernetes/client-node";
import { Registry } from "prom-client";
import { LABELS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMRunnerPool, type ImpVMTemplate, IMP_VM_CLASSES, IMP_VM_TEMPLATES } from "../api/index.ts";
import type { GitHubClientOptions } from "../forge/index.ts";
import {
  createResourceClient,
  EVENT_RESOURCE,
  EventRecorder,
  HealthServer,
  Informer,
  labelIndex,
  LEASE_RESOURCE,
  Manager, type CoreEvent,
  type KubeObject,
  type Lease,
  type ResourceClient,
} from "../kube/index.ts";
import { DrainController, NodeLossController } from "./nodes/index.ts";
import { isTerminalVM, KubeNodeTracker, nodeCordoned, nodeMayHaveRoom, SchedulerController } from "./scheduler/index.ts";
import { NO_FAULTS, systemClock, type Clock, type FaultPoints, type Logger } from "../shared/index.ts";
import { IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, PoolController, SECRETS, type FailureBudgetPolicy, type SecretObject } from "./pools/index.ts";
import { InputsController, SetupController, VM_NODE_INDEX, VM_POOL_INDEX } from "./setup/index.ts";
import { PoolForges } from "./forges/index.ts";
import { PoolWebhookSecrets, WebhookServer } from "./webhook/index.ts";
import { JobObserver } from "./jobs/index.ts";
import { DemandEvents, jobsWaitingForCapacity } from "./demand/index.ts";
import { DEFAULT_LISTENER_TIMINGS, ScaleSetListeners } from "./scale-sets/index.ts";
import { registerFleetMetrics } from "./fleet-metrics.ts";

export interface OperatorOptions {
  readonly kubeConfig: KubeConfig;
  readonly logger: Logger;
  /** Watch only this namespace's pools and VMs; undefined = all namespaces. */
  readonly namespace?: string;
  /** Namespace of the operator's leader-election Lease. */
  readonly leaseNamespace?: string;
  /** Leader election on (default) or off (a single replica, tests). */
  readonly leaderElection?: boolean;
  readonly identity?: string;
  /** Health/metrics port; 0 = any free port; undefined = no server. */
  readonly healthPort?: number;
  /** Address the health/metrics server listens on (default 127.0.0.1; 0.0.0.0 in a Pod, for probes and scraping). */
  readonly healthHost?: string;
  /** Webhook receiver port; 0 = any free port; undefined = no receiver. Secrets: `webhookSecrets` and the pools' spec.webhook.secretRef. */
  readonly webhookPort?: number;
  readonly webhookHost?: string;
  /** The GitHub App's webhook secret, or two while rotating: trusted for every pool. Optional when pools name their own. */
  readonly webhookSecrets?: readonly string[];
  /** Replaces every pool's spec.github.apiURL. */
  readonly githubUrl?: string;
  readonly githubClientOptions?: Partial<Omit<GitHubClientOptions, "credentials" | "baseUrl">>;
  readonly failureBudget?: FailureBudgetPolicy;
  readonly runnerListIntervalMs?: number;
  /** How often webhook pools list the jobs waiting on their forge (PoolController's default otherwise). */
  readonly demandListIntervalMs?: number;
  /** How often a Gitea pool lists the jobs waiting on Gitea (PoolController's default otherwise). */
  readonly queueListIntervalMs?: number;
  /** How often a scale-set listener retries while another session holds its scale set (default 30 s). */
  readonly scaleSetConflictRetryMs?: number;
  /** Concurrent setup reconciles (mint, deregister); each may wait on GitHub's write pacing. */
  readonly setupWorkers?: number;
  /** Run the scheduler (default true). Off when something else binds VMs (tests that play scheduler). */
  readonly scheduler?: boolean;
  /** Run node-loss handling (default true). */
  readonly nodeLoss?: boolean;
  /** Namespace of the node agents' liveness Leases (the agents' leaseNamespace; default imp-system). */
  readonly agentLeaseNamespace?: string;
  /** A node whose agent Lease is this much past its renewal is lost (NodeLossController's default otherwise). */
  readonly nodeLostAfterMs?: number;
  /** Watch core/v1 Nodes so a deleted Node means its VMs are lost (default true; needs list/watch on nodes). */
  readonly watchKubeNodes?: boolean;
  readonly clock?: Clock;
  readonly registry?: Registry;
  /**
   * The fault points of the failure-proof suite (docs/failure-proof-points.md): `imp operator` reads
   * them from IMP_TEST_FAULT_POINTS, which nothing but the suite sets. Default: none.
   */
  readonly faults?: FaultPoints;
}

export const OPERATOR_LEASE_NAME = "imp-operator";
export const DEFAULT_AGENT_LEASE_NAMESPACE = "imp-system";
const KUBE_NODES = { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false } as const;
const RESYNC_MS = 10 * 60_000;

/** The options with every default filled in, once; the operator below only wires. */
type OperatorConfig = OperatorOptions & {
  readonly clock: Clock;
  readonly registry: Registry;
  readonly faults: FaultPoints;
  /** Names this replica in Events and scale-set sessions. */
  readonly instance: string;
  /** This replica's identity in the leader-election Lease (unique per process). */
  readonly leaderIdentity: string;
  readonly leaderElection: boolean;
  readonly leaseNamespace: string;
  readonly agentLeaseNamespace: string;
  readonly scheduler: boolean;
  readonly nodeLoss: boolean;
  readonly watchKubeNodes: boolean;
};

export function operatorDefaults(o: OperatorOptions): OperatorConfig {
  return {
    ...o,
    clock: o.clock ?? systemClock,
    registry: o.registry ?? new Registry(),
    faults: o.faults ?? NO_FAULTS,
    instance: o.identity ?? hostname(),
    leaderIdentity: o.identity ?? `${hostname()}-${process.pid}`,
    leaderElection: o.leaderElection ?? true,
    leaseNamespace: o.leaseNamespace ?? o.namespace ?? "default",
    agentLeaseNamespace: o.agentLeaseNamespace ?? DEFAULT_AGENT_LEASE_NAMESPACE,
    scheduler: o.scheduler ?? true,
    nodeLoss: o.nodeLoss ?? true,
    watchKubeNodes: o.watchKubeNodes ?? true,
  };
}

/** The operator's typed clients, one per kind it reads or writes. */
function operatorClients(kc: KubeConfig) {
  return {
    vms: createResourceClient<ImpVM>(kc, IMP_VMS),
    pools: createResourceClient<ImpVMRunnerPool>(kc, IMP_VM_RUNNER_POOLS),
    nodes: createResourceClient<ImpNode>(kc, IMP_NODES),
    secrets: createResourceClient<SecretObject>(kc, SECRETS),
    leases: createResourceClient<Lease>(kc, LEASE_RESOURCE),
  };
}
type OperatorClients = ReturnType<typeof operatorClients>;

/** What the scheduler and node loss watch besides VMs and ImpNodes: agent Leases and core Nodes. */
interface NodeView {
  readonly leaseCache: Informer<Lease>;
  readonly kubeNodes: KubeNodeTracker | undefined;
}

export class Operator {
  readonly registry: Registry;
  readonly pools: PoolController;
  readonly setup: SetupController;
  readonly webhook: WebhookServer | undefined;
  readonly health: HealthServer | undefined;
  readonly vmCache: Informer<ImpVM>;
  readonly poolCache: Informer<ImpVMRunnerPool>;
  readonly nodeCache: Informer<ImpNode>;
  readonly scheduler: SchedulerController | undefined;
  readonly nodeLoss: NodeLossController | undefined;
  /** Cordoned nodes: drain marks, jobs past their pool's grace ended (with node loss). */
  readonly drain: DrainController | undefined;
  /** Seals each VM's Secret inputs to its node (agents cannot read Secrets). */
  readonly inputs: InputsController;
  readonly templateCache: Informer<ImpVMTemplate>;
  /** ARC-named job metrics, job Events and per-step VM histograms (docs/operator.md). */
  readonly jobs: JobObserver;
  /** What the forges push (webhook deliveries, scale-set job messages), fanned out to the pools' demand and the job observer. */
  readonly demandEvents: DemandEvents;
  /** One scale-set listener per scale-set pool, on the leader. */
  readonly scaleSets: ScaleSetListeners;
  /** The fault points this operator hits (tests read `hits`). */
  readonly faults: FaultPoints;
  /** Caches only the scheduler and node loss need. */
  readonly #extraCaches: Array<Informer<KubeObject>> = [];
  readonly #c: OperatorConfig;
  readonly #api: OperatorClients;

  constructor(options: OperatorOptions) {
    const c = operatorDefaults(options);
    this.#c = c;
    this.registry = c.registry;
    this.faults = c.faults;
    const api = (this.#api = operatorClients(c.kubeConfig));
    const cache = <T extends KubeObject>(client: ResourceClient<T>, name: string, scoped: boolean, resyncPeriodMs?: number): Informer<T> =>
      new Informer({ client, namespace: scoped ? c.namespace : undefined, resyncPeriodMs, clock: c.clock, logger: c.logger.child({ cache: name }) });
    this.vmCache = cache(api.vms, "impvms", true, RESYNC_MS);
    this.vmCache.addIndex(VM_POOL_INDEX, labelIndex(LABELS.pool));
    this.vmCache.addIndex(VM_NODE_INDEX, (vm) => [vm.status?.nodeName]);
    this.poolCache = cache(api.pools, "impvmrunnerpools", true, RESYNC_MS);
    this.nodeCache = cache(api.nodes, "impnodes", false);
    const recorder = new EventRecorder({ client: createResourceClient<CoreEvent>(c.kubeConfig, EVENT_RESOURCE), component: "imp-operator", instance: c.instance, clock: c.clock, logger: c.logger });
    this.demandEvents = new DemandEvents(c.logger.child({ component: "demand" }));
    const forges = new PoolForges({ secrets: api.secrets, baseUrlOverride: c.githubUrl, clientOptions: c.githubClientOptions, clock: c.clock, logger: c.logger.child({ component: "github" }) });
    this.scaleSets = this.#scaleSetListeners(forges, recorder);
    const common = { vmCache: this.vmCache, poolCache: this.poolCache, forges, recorder, registry: this.registry, logger: c.logger, clock: c.clock, faults: c.faults };
    const nodes = c.scheduler || c.nodeLoss ? this.#nodeView(cache) : undefined;
    const cordoned = (node: string): boolean => nodeCordoned(this.nodeCache.get(node), node, nodes?.kubeNodes);
    this.pools = new PoolController({ ...common, scaleSets: this.scaleSets, pools: api.pools, vms: api.vms, cordoned, failureBudget: c.failureBudget, runnerListIntervalMs: c.runnerListIntervalMs, demandListIntervalMs: c.demandListIntervalMs, queueListIntervalMs: c.queueListIntervalMs });
    // A node cordoned or uncordoned: the pools with VMs there reconsider them (drain, or stop draining).
    const drainPoolsOf = (node: string): void => {
      for (const vm of this.vmCache.byIndex(VM_NODE_INDEX, node)) {
        const pool = vm.metadata.labels?.[LABELS.pool];
        if (pool !== undefined) this.pools.controller.enqueue(`${vm.metadata.namespace ?? ""}/${pool}`);
      }
    };
    this.nodeCache.addEventHandler({ onUpdate: (old, node) => old.spec?.unschedulable !== node.spec?.unschedulable && drainPoolsOf(node.metadata.name) });
    nodes?.kubeNodes?.onCordonChanged(drainPoolsOf);
    this.setup = new SetupController({ ...common, vms: api.vms, nodeCache: this.nodeCache, workers: c.setupWorkers });
    this.templateCache = cache(createResourceClient<ImpVMTemplate>(c.kubeConfig, IMP_VM_TEMPLATES), "impvmtemplates", true);
    this.inputs = new InputsController({ vms: api.vms, secrets: api.secrets, vmCache: this.vmCache, nodeCache: this.nodeCache, templateCache: this.templateCache, recorder, registry: this.registry, logger: c.logger, clock: c.clock });
    this.jobs = new JobObserver({ vmCache: this.vmCache, poolCache: this.poolCache, recorder, registry: this.registry, clock: c.clock, logger: c.logger.child({ component: "jobs" }) });
    this.demandEvents.listen(this.pools.demand).listen({ onWorkflowJob: (forge, event, audience) => this.jobs.onWorkflowJob(event, audience, forge), onScaleSetJob: (key, job) => this.jobs.onScaleSetJob(key, job) });
    this.scheduler = c.scheduler && nodes !== undefined ? this.#schedulerOf(nodes, recorder, cache) : undefined;
    if (this.scheduler !== undefined) this.#nudgeListenersOnRoom(nodes?.kubeNodes);
    this.nodeLoss = c.nodeLoss && nodes !== undefined ? new NodeLossController({ vms: api.vms, leases: api.leases, vmInformer: this.vmCache, nodeInformer: this.nodeCache, leaseInformer: nodes.leaseCache, leaseNamespace: c.agentLeaseNamespace, kubeNodes: nodes.kubeNodes, lostAfterMs: c.nodeLostAfterMs, registry: this.registry, recorder, clock: c.clock, logger: c.logger }) : undefined;
    this.drain = c.nodeLoss && nodes !== undefined ? new DrainController({ vms: api.vms, nodes: api.nodes, vmInformer: this.vmCache, nodeInformer: this.nodeCache, poolInformer: this.poolCache, kubeNodes: nodes.kubeNodes, registry: this.registry, recorder, clock: c.clock, logger: c.logger }) : undefined;
    this.webhook = c.webhookPort === undefined ? undefined : this.#webhookServer(c.webhookPort);
    this.health = c.healthPort === undefined ? undefined : new HealthServer({ registry: this.registry, caches: { impvms: this.vmCache, impvmrunnerpools: this.poolCache, impnodes: this.nodeCache, ...(nodes === undefined ? {} : { agentLeases: nodes.leaseCache }) }, port: c.healthPort, host: c.healthHost, logger: c.logger });
  }

  #scaleSetListeners(forges: PoolForges, recorder: EventRecorder): ScaleSetListeners {
    const c = this.#c;
    return new ScaleSetListeners({
      poolCache: this.poolCache,
      client: (pool, signal) => forges.scaleSetClientFor(pool, signal),
      onChange: (key) => this.pools.controller.enqueue(key),
      onJob: (key, job) => this.demandEvents.scaleSetJob(key, job),
      onEvent: (pool, type, reason, message) => void recorder.record(pool, { type, reason, message }),
      ownerName: c.instance,
      logger: c.logger.child({ component: "scale-sets" }),
      clock: c.clock,
      timings: { ...DEFAULT_LISTENER_TIMINGS, conflictRetryMs: c.scaleSetConflictRetryMs ?? DEFAULT_LISTENER_TIMINGS.conflictRetryMs },
      faults: c.faults,
      // Undefined without a scheduler in this process: the listener then says maxConcurrent.
      capacity: (pool) => this.scheduler?.capacityForPool(pool),
    });
  }

  *#scaleSetJobsWaiting(): Iterable<readonly [string, number]> {
    for (const [key] of this.scaleSets.sessions()) yield [key, jobsWaitingForCapacity(this.scaleSets.view(key), this.poolCache.get(key)?.spec.maxConcurrent ?? 0)];
  }

  /** A VM created, ended or being deleted, a node that appeared, changed or was (un)cordoned: the listeners' capacity may have changed. */
  #nudgeListenersOnRoom(kubeNodes: KubeNodeTracker | undefined): void {
    const changed = (): void => {
      // The scheduler's look at the room is stale now, whatever its age: a nudge must see the change.
      this.scheduler?.roomChanged();
      this.scaleSets.roomMayHaveChanged();
    };
    this.vmCache.addEventHandler({
      onAdd: changed,
      onUpdate: (old, vm) => {
        if ((!isTerminalVM(old) && isTerminalVM(vm)) || (old.metadata.deletionTimestamp === undefined && vm.metadata.deletionTimestamp !== undefined)) changed();
      },
      onDelete: changed,
    });
    this.nodeCache.addEventHandler({ onAdd: changed, onUpdate: (old, node) => (nodeMayHaveRoom(old, node) || old.spec?.unschedulable !== node.spec?.unschedulable) && changed(), onDelete: changed });
    kubeNodes?.onCordonChanged(changed);
  }

  /** Agent Leases and (unless told not to) core/v1 Nodes: a deleted Node's node is lost and never chosen. */
  #nodeView(cache: <T extends KubeObject>(client: ResourceClient<T>, name: string, scoped: boolean) => Informer<T>): NodeView {
    const c = this.#c;
    const leaseCache = new Informer({ client: this.#api.leases, namespace: c.agentLeaseNamespace, clock: c.clock, logger: c.logger.child({ cache: "agent-leases" }) });
    this.#extraCaches.push(leaseCache as unknown as Informer<KubeObject>);
    if (!c.watchKubeNodes) return { leaseCache, kubeNodes: undefined };
    const kubeNodeInformer = cache(createResourceClient<KubeObject>(c.kubeConfig, KUBE_NODES), "nodes", false);
    this.#extraCaches.push(kubeNodeInformer);
    return { leaseCache, kubeNodes: new KubeNodeTracker(kubeNodeInformer) };
  }

  #schedulerOf(nodes: NodeView, recorder: EventRecorder, cache: <T extends KubeObject>(client: ResourceClient<T>, name: string, scoped: boolean) => Informer<T>): SchedulerController {
    const c = this.#c;
    const classCache = cache(createResourceClient<ImpVMClass>(c.kubeConfig, IMP_VM_CLASSES), "impvmclasses", false);
    this.#extraCaches.push(classCache as unknown as Informer<KubeObject>);
    return new SchedulerController({
      vms: this.#api.vms,
      nodes: this.#api.nodes,
      vmInformer: this.vmCache,
      nodeInformer: this.nodeCache,
      leaseInformer: nodes.leaseCache,
      leaseNamespace: c.agentLeaseNamespace,
      classInformer: classCache,
      templateInformer: this.templateCache,
      registry: this.registry,
      recorder,
      clock: c.clock,
      logger: c.logger,
      nodeLostAfterMs: c.nodeLostAfterMs,
      kubeNodes: nodes.kubeNodes,
      faults: c.faults,
    });
  }

  /** The webhook receiver: the operator's own secrets count for every pool; each pool's spec.webhook.secretRef for that pool. */
  #webhookServer(port: number): WebhookServer {
    const c = this.#c;
    const webhookSecrets = new PoolWebhookSecrets({ poolCache: this.poolCache, secrets: this.#api.secrets, operatorSecrets: c.webhookSecrets ?? [], clock: c.clock, logger: c.logger.child({ component: "webhook" }) });
    return new WebhookServer({
      secrets: [],
      trust: (forge, signal) => webhookSecrets.trusts(forge, signal),
      onEvent: (forge, event, audience) => this.demandEvents.workflowJob(forge, event, audience),
      port,
      host: c.webhookHost,
      registry: this.registry,
      logger: c.logger.child({ component: "webhook" }),
      clock: c.clock,
    });
  }

  async start(signal: AbortSignal): Promise<void> {
    const c = this.#c;
    const manager = new Manager({
      logger: c.logger,
      ...(c.leaderElection ? { leaderElection: { client: this.#api.leases, namespace: c.leaseNamespace, name: OPERATOR_LEASE_NAME, identity: c.leaderIdentity, logger: c.logger } } : {}),
    })
      .addCache(this.poolCache)
      .addCache(this.vmCache)
      .addCache(this.nodeCache)
      .addCache(this.templateCache);
    for (const cache of this.#extraCaches) manager.addCache(cache);
    registerFleetMetrics({ registry: this.registry, clock: c.clock, isLeader: () => manager.isLeader(), vmCache: this.vmCache, scaleSetSessions: () => this.scaleSets.sessions(), scaleSetJobsWaiting: () => this.#scaleSetJobsWaiting() });
    if (this.scheduler !== undefined) manager.addController(this.scheduler);
    if (this.nodeLoss !== undefined) manager.addController(this.nodeLoss);
    if (this.drain !== undefined) manager.addController(this.drain);
    manager.addController(this.pools.controller).addController(this.setup.controller).addController(this.inputs.controller).addController(this.scaleSets);
    if (this.webhook !== undefined) manager.addServer(this.webhook);
    if (this.health !== undefined) manager.addHealthServer(this.health);
    await manager.start(signal);
  }
}
