/**
 * `imp operator`: builds the whole operator from a kubeconfig and options and runs it. Caches (pools,
 * VMs, ImpNodes, agent Leases, classes, templates, core Nodes) → leader election (a Lease) →
 * controllers (scheduler, node loss, runner pools, runner setup and registration removal) →
 * webhook receiver; a health/metrics server answers from the start.
 * Runs until its signal aborts; rejects on LeadershipLost so the process exits and campaigns anew.
 */
import { hostname } from "node:os";
import type { KubeConfig } from "@kubernetes/client-node";
import { Registry } from "prom-client";
import { LABELS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMRunnerPool, type ImpVMTemplate, IMP_VM_CLASSES, IMP_VM_TEMPLATES } from "../api/index.ts";
import type { GitHubClientOptions } from "../github/index.ts";
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
import { NodeLossController } from "./nodes/index.ts";
import { KubeNodeTracker, SchedulerController } from "./scheduler/index.ts";
import { FaultPoints, systemClock, type Clock, type Logger } from "../shared/index.ts";
import { IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, PoolController, SECRETS, type FailureBudgetPolicy, type SecretObject } from "./pools/index.ts";
import { PoolForges, SetupController, VM_NODE_INDEX, VM_POOL_INDEX } from "./setup/index.ts";
import { PoolWebhookSecrets, WebhookServer } from "./webhook/index.ts";
import { JobObserver } from "./jobs/index.ts";
import { DEFAULT_LISTENER_TIMINGS, ScaleSetListeners } from "./scale-sets/index.ts";

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
   * Tests only: the fault points of the failure-proof suite (docs/failure-proof-points.md). Default:
   * the plan in IMP_TEST_FAULT_POINTS, which nothing but the suite sets (unset = every point passes).
   */
  readonly faults?: FaultPoints;
}

export const OPERATOR_LEASE_NAME = "imp-operator";
export const DEFAULT_AGENT_LEASE_NAMESPACE = "imp-system";
const KUBE_NODES = { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false } as const;

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
  /** ARC-named job metrics, job Events and per-step VM histograms (docs/operator.md). */
  readonly jobs: JobObserver;
  /** One scale-set listener per scale-set pool, on the leader. */
  readonly scaleSets: ScaleSetListeners;
  /** The fault points this operator hits (tests read `hits`). */
  readonly faults: FaultPoints;
  /** Caches only the scheduler and node loss need. */
  readonly #extraCaches: Array<Informer<KubeObject>> = [];
  readonly #o: OperatorOptions;
  readonly #leases: ResourceClient<Lease>;

  constructor(options: OperatorOptions) {
    this.#o = options;
    const kc = options.kubeConfig;
    const clock = options.clock ?? systemClock;
    const logger = options.logger;
    this.registry = options.registry ?? new Registry();
    this.faults = options.faults ?? FaultPoints.fromEnv(process.env, (point, action) => logger.warn({ point, action: action.kind }, "test fault point fired"));
    const faults = this.faults;
    const vms = createResourceClient<ImpVM>(kc, IMP_VMS);
    const pools = createResourceClient<ImpVMRunnerPool>(kc, IMP_VM_RUNNER_POOLS);
    const nodes = createResourceClient<ImpNode>(kc, IMP_NODES);
    const secrets = createResourceClient<SecretObject>(kc, SECRETS);
    this.#leases = createResourceClient<Lease>(kc, LEASE_RESOURCE);
    const ns = options.namespace === undefined ? {} : { namespace: options.namespace };
    this.vmCache = new Informer({ client: vms, ...ns, resyncPeriodMs: 10 * 60_000, clock, logger: logger.child({ cache: "impvms" }) });
    this.vmCache.addIndex(VM_POOL_INDEX, labelIndex(LABELS.pool));
    this.vmCache.addIndex(VM_NODE_INDEX, (vm) => [vm.status?.nodeName]);
    this.poolCache = new Informer({ client: pools, ...ns, resyncPeriodMs: 10 * 60_000, clock, logger: logger.child({ cache: "impvmrunnerpools" }) });
    this.nodeCache = new Informer({ client: nodes, clock, logger: logger.child({ cache: "impnodes" }) });
    const recorder = new EventRecorder({ client: createResourceClient<CoreEvent>(kc, EVENT_RESOURCE), component: "imp-operator", instance: options.identity ?? hostname(), clock, logger });
    const forges = new PoolForges({
      secrets,
      ...(options.githubUrl === undefined ? {} : { baseUrlOverride: options.githubUrl }),
      ...(options.githubClientOptions === undefined ? {} : { clientOptions: options.githubClientOptions }),
      clock,
      logger: logger.child({ component: "github" }),
    });
    this.scaleSets = new ScaleSetListeners({
      poolCache: this.poolCache,
      client: (pool, signal) => forges.scaleSetClientFor(pool, signal),
      onChange: (key) => this.pools.controller.enqueue(key),
      onJob: (key, job) => {
        this.pools.onScaleSetJob(key, job);
        this.jobs.onScaleSetJob(key, job);
      },
      onEvent: (pool, type, reason, message) => void recorder.record(pool, { type, reason, message }),
      ownerName: options.identity ?? hostname(),
      logger: logger.child({ component: "scale-sets" }),
      clock,
      timings: { ...DEFAULT_LISTENER_TIMINGS, ...(options.scaleSetConflictRetryMs === undefined ? {} : { conflictRetryMs: options.scaleSetConflictRetryMs }) },
      faults,
    });
    this.pools = new PoolController({
      scaleSets: this.scaleSets,
      pools,
      vms,
      poolCache: this.poolCache,
      vmCache: this.vmCache,
      forges,
      recorder,
      registry: this.registry,
      logger,
      clock,
      ...(options.failureBudget === undefined ? {} : { failureBudget: options.failureBudget }),
      ...(options.runnerListIntervalMs === undefined ? {} : { runnerListIntervalMs: options.runnerListIntervalMs }),
      ...(options.demandListIntervalMs === undefined ? {} : { demandListIntervalMs: options.demandListIntervalMs }),
      ...(options.queueListIntervalMs === undefined ? {} : { queueListIntervalMs: options.queueListIntervalMs }),
      faults,
    });
    this.setup = new SetupController({
      vms,
      secrets,
      vmCache: this.vmCache,
      poolCache: this.poolCache,
      nodeCache: this.nodeCache,
      forges,
      recorder,
      registry: this.registry,
      logger,
      clock,
      faults,
      ...(options.setupWorkers === undefined ? {} : { workers: options.setupWorkers }),
    });
    this.jobs = new JobObserver({ vmCache: this.vmCache, poolCache: this.poolCache, recorder, registry: this.registry, clock, logger: logger.child({ component: "jobs" }) });
    const agentLeaseNamespace = options.agentLeaseNamespace ?? DEFAULT_AGENT_LEASE_NAMESPACE;
    const wantScheduler = options.scheduler ?? true;
    const wantNodeLoss = options.nodeLoss ?? true;
    let leaseCache: Informer<Lease> | undefined;
    if (wantScheduler || wantNodeLoss) {
      leaseCache = new Informer({ client: this.#leases, namespace: agentLeaseNamespace, clock, logger: logger.child({ cache: "agent-leases" }) });
      this.#extraCaches.push(leaseCache as unknown as Informer<KubeObject>);
    }
    // One view of core/v1 Nodes for node loss and placement: a deleted Node's node is lost and never chosen.
    let kubeNodes: KubeNodeTracker | undefined;
    if ((wantScheduler || wantNodeLoss) && (options.watchKubeNodes ?? true)) {
      const kubeNodeInformer = new Informer({ client: createResourceClient<KubeObject>(kc, KUBE_NODES), clock, logger: logger.child({ cache: "nodes" }) });
      this.#extraCaches.push(kubeNodeInformer);
      kubeNodes = new KubeNodeTracker(kubeNodeInformer);
    }
    if (wantScheduler && leaseCache !== undefined) {
      const classCache = new Informer({ client: createResourceClient<ImpVMClass>(kc, IMP_VM_CLASSES), clock, logger: logger.child({ cache: "impvmclasses" }) });
      const templateCache = new Informer({ client: createResourceClient<ImpVMTemplate>(kc, IMP_VM_TEMPLATES), ...ns, clock, logger: logger.child({ cache: "impvmtemplates" }) });
      this.#extraCaches.push(classCache as unknown as Informer<KubeObject>, templateCache as unknown as Informer<KubeObject>);
      this.scheduler = new SchedulerController({
        vms,
        nodes,
        vmInformer: this.vmCache,
        nodeInformer: this.nodeCache,
        leaseInformer: leaseCache,
        leaseNamespace: agentLeaseNamespace,
        classInformer: classCache,
        templateInformer: templateCache,
        registry: this.registry,
        recorder,
        clock,
        logger,
        ...(options.nodeLostAfterMs === undefined ? {} : { nodeLostAfterMs: options.nodeLostAfterMs }),
        ...(kubeNodes === undefined ? {} : { kubeNodes }),
        faults,
      });
    }
    if (wantNodeLoss && leaseCache !== undefined) {
      this.nodeLoss = new NodeLossController({
        vms,
        secrets,
        leases: this.#leases,
        vmInformer: this.vmCache,
        nodeInformer: this.nodeCache,
        leaseInformer: leaseCache,
        leaseNamespace: agentLeaseNamespace,
        ...(kubeNodes === undefined ? {} : { kubeNodes }),
        ...(options.nodeLostAfterMs === undefined ? {} : { lostAfterMs: options.nodeLostAfterMs }),
        registry: this.registry,
        recorder,
        clock,
        logger,
      });
    }
    if (options.webhookPort !== undefined) {
      // The operator's own secrets count for every pool; each pool's spec.webhook.secretRef for that pool.
      const webhookSecrets = new PoolWebhookSecrets({ poolCache: this.poolCache, secrets, operatorSecrets: options.webhookSecrets ?? [], clock, logger: logger.child({ component: "webhook" }) });
      this.webhook = new WebhookServer({
        secrets: [],
        trust: (signal) => webhookSecrets.trusts(signal),
        onEvent: (event, audience) => {
          this.pools.onWorkflowJob(event, audience);
          this.jobs.onWorkflowJob(event, audience);
        },
        port: options.webhookPort,
        ...(options.webhookHost === undefined ? {} : { host: options.webhookHost }),
        registry: this.registry,
        logger: logger.child({ component: "webhook" }),
        clock,
      });
    }
    this.health =
      options.healthPort === undefined
        ? undefined
        : new HealthServer({ registry: this.registry, caches: { impvms: this.vmCache, impvmrunnerpools: this.poolCache, impnodes: this.nodeCache, ...(leaseCache === undefined ? {} : { agentLeases: leaseCache }) }, port: options.healthPort, ...(options.healthHost === undefined ? {} : { host: options.healthHost }), logger });
  }

  async start(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const identity = o.identity ?? `${hostname()}-${process.pid}`;
    const manager = new Manager({
      logger: o.logger,
      ...(o.leaderElection === false ? {} : { leaderElection: { client: this.#leases, namespace: o.leaseNamespace ?? o.namespace ?? "default", name: OPERATOR_LEASE_NAME, identity, logger: o.logger } }),
    })
      .addCache(this.poolCache)
      .addCache(this.vmCache)
      .addCache(this.nodeCache);
    for (const cache of this.#extraCaches) manager.addCache(cache);
    if (this.scheduler !== undefined) manager.addController(this.scheduler);
    if (this.nodeLoss !== undefined) manager.addController(this.nodeLoss);
    manager.addController(this.pools.controller).addController(this.setup.controller).addController(this.scaleSets);
    if (this.webhook !== undefined) manager.addServer(this.webhook);
    if (this.health !== undefined) manager.addHealthServer(this.health);
    await manager.start(signal);
  }
}
