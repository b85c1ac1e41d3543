/**
 * `imp operator`: builds the whole operator from a kubeconfig and options and runs it. Caches (pools,
 * VMs, nodes) → leader election (a Lease) → controllers (runner pools, runner setup and
 * registration removal) → webhook receiver; a health/metrics server answers from the start.
 * Runs until its signal aborts; rejects on LeadershipLost so the process exits and campaigns anew.
 */
import { hostname } from "node:os";
import type { KubeConfig } from "@kubernetes/client-node";
import { Registry } from "prom-client";
import { LABELS, type ImpNode, type ImpVM, type ImpVMRunnerPool } from "../api/index.ts";
import type { GitHubClientOptions } from "../github/index.ts";
import {
  createResourceClient,
  EVENT_RESOURCE,
  EventRecorder,
  HealthServer,
  Informer,
  labelIndex,
  LEASE_RESOURCE,
  Manager,
  type CoreEvent,
  type Lease,
  type ResourceClient,
} from "../kube/index.ts";
import { systemClock, type Clock, type Logger } from "../shared/index.ts";
import { IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, PoolController, SECRETS, type FailureBudgetPolicy, type SecretObject } from "./pools/index.ts";
import { GitHubClients, SetupController, VM_NODE_INDEX, VM_POOL_INDEX, type SetupFaults } from "./setup/index.ts";
import { WebhookServer } from "./webhook/index.ts";

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
  /** Webhook receiver port; 0 = any free port; undefined = no receiver. Needs `webhookSecrets`. */
  readonly webhookPort?: number;
  readonly webhookHost?: string;
  /** The GitHub App's webhook secret, or two while rotating. */
  readonly webhookSecrets?: readonly string[];
  /** Replaces every pool's spec.github.apiURL. */
  readonly githubUrl?: string;
  readonly githubClientOptions?: Partial<Omit<GitHubClientOptions, "credentials" | "baseUrl">>;
  readonly failureBudget?: FailureBudgetPolicy;
  readonly runnerListIntervalMs?: number;
  readonly clock?: Clock;
  readonly registry?: Registry;
  /** Tests only. */
  readonly faults?: SetupFaults;
}

export const OPERATOR_LEASE_NAME = "imp-operator";

export class Operator {
  readonly registry: Registry;
  readonly pools: PoolController;
  readonly setup: SetupController;
  readonly webhook: WebhookServer | undefined;
  readonly health: HealthServer | undefined;
  readonly vmCache: Informer<ImpVM>;
  readonly poolCache: Informer<ImpVMRunnerPool>;
  readonly nodeCache: Informer<ImpNode>;
  readonly #o: OperatorOptions;
  readonly #leases: ResourceClient<Lease>;

  constructor(options: OperatorOptions) {
    this.#o = options;
    const kc = options.kubeConfig;
    const clock = options.clock ?? systemClock;
    const logger = options.logger;
    this.registry = options.registry ?? new Registry();
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
    const github = new GitHubClients({
      secrets,
      ...(options.githubUrl === undefined ? {} : { baseUrlOverride: options.githubUrl }),
      ...(options.githubClientOptions === undefined ? {} : { clientOptions: options.githubClientOptions }),
      clock,
      logger: logger.child({ component: "github" }),
    });
    this.pools = new PoolController({
      pools,
      vms,
      poolCache: this.poolCache,
      vmCache: this.vmCache,
      github,
      recorder,
      registry: this.registry,
      logger,
      clock,
      ...(options.failureBudget === undefined ? {} : { failureBudget: options.failureBudget }),
      ...(options.runnerListIntervalMs === undefined ? {} : { runnerListIntervalMs: options.runnerListIntervalMs }),
    });
    this.setup = new SetupController({
      vms,
      secrets,
      vmCache: this.vmCache,
      poolCache: this.poolCache,
      nodeCache: this.nodeCache,
      github,
      recorder,
      registry: this.registry,
      logger,
      clock,
      ...(options.faults === undefined ? {} : { faults: options.faults }),
    });
    if (options.webhookPort !== undefined) {
      const secretsList = options.webhookSecrets ?? [];
      this.webhook = new WebhookServer({
        secrets: secretsList,
        onEvent: (event) => this.pools.onWorkflowJob(event),
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
        : new HealthServer({ registry: this.registry, caches: { impvms: this.vmCache, impvmrunnerpools: this.poolCache, impnodes: this.nodeCache }, port: options.healthPort, logger });
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
      .addCache(this.nodeCache)
      .addController(this.pools.controller)
      .addController(this.setup.controller);
    if (this.webhook !== undefined) manager.addServer(this.webhook);
    if (this.health !== undefined) manager.addHealthServer(this.health);
    await manager.start(signal);
  }
}
