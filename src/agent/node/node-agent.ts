/**
 * `imp agent`: one per node. Watches the ImpVMs bound to this node (field selector on
 * status.nodeName), and for each runs observe → decide (vm-decision.ts, pure) → act (VmRuntime and
 * API writes). Owns the node's ImpNode status and liveness Lease, its finalizer on every VM it
 * touches, and the VM phases from Preparing to terminal.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import type { KubeConfig } from "@kubernetes/client-node";
import { Registry } from "prom-client";
import { canTransitionVM, isTerminalVMPhase, FINALIZERS, LABELS, openSetup, parseSealedSetup, parseVmInputs, secretKeysNeeded, templateOf, VM_REASONS, type ImpNode, type ImpVM, type ImpVMClass, type ImpVMStatus, type ImpVMTemplate, type NodeKeyPair, IMP_VMS, IMP_VM_TEMPLATES, IMP_VM_CLASSES, IMP_NODES } from "../../api/index.ts";
import {
  Controller,
  createResourceClient,
  done,
  EVENT_RESOURCE,
  EventRecorder,
  HealthServer,
  Informer,
  isNotFound,
  LEASE_RESOURCE,
  Manager,
  mutateWithRetry,
  requeueAfter, type CoreEvent,
  type Lease,
  type ReconcileContext,
  type ReconcileResult,
  type ResourceClient,
  hasFinalizer,
  addFinalizer,
  removeFinalizer,
  type Stored,
} from "../../kube/index.ts";
import { describeError, NO_FAULTS, ImpError, retryableError, systemClock, terminalError, type Clock, type FaultPoints, type Logger } from "../../shared/index.ts";
import type { SupervisorCgroupOptions } from "../supervisor/index.ts";
import { DEFAULT_RUNTIME_TIMEOUTS, DEFAULT_WORKLOAD_ENV, VmDir, VmRuntime, type LocalSetupState, type LocalVm, type VmRef, type VmRuntimeOptions } from "../vm/index.ts";
import { CacheVolumes } from "../cache/index.ts";
import { CacheSettler } from "./cache-settler.ts";
import type { VmmKind } from "../vmm/index.ts";
import { AgentMetrics } from "./agent-metrics.ts";
import { KubeSetupStore } from "./kube-setup-store.ts";
import { decideDecommission, type DecommissionRequest } from "./decide-decommission.ts";
import { NodeReporter, type DecommissionOutcome, type NodeFacts } from "./node-reporter.ts";
import { NodeSweeper, type LiveSet } from "./node-sweeper.ts";
import { apiSituation, decideVm, statusFromLocal, type AgentAction } from "./vm-decision.ts";
import { bootRequestOf, planVm, withImageCredentials, type KernelFiles, type VmPlan } from "./vm-plan.ts";
import { fitsBeside } from "./node-room.ts";

export interface NodeAgentOptions {
  readonly kubeConfig: KubeConfig;
  readonly nodeName: string;
  /** Namespace of the agents' liveness Leases. */
  readonly leaseNamespace: string;
  readonly key: NodeKeyPair;
  readonly facts: NodeFacts;
  readonly kernels: ReadonlyMap<string, KernelFiles>;
  /** Environment every workload starts with (below its own). */
  readonly baseEnv?: Readonly<Record<string, string>>;
  readonly runtime: Omit<VmRuntimeOptions, "setups" | "notify" | "clock" | "logger" | "observe" | "faults">;
  /** Which VMM boots a plan here (node config, class preference, KVM). */
  readonly chooseVmm: (plan: VmPlan) => VmmKind;
  /**
   * Called once the agent has stopped with no VM on the node (neither in the runtime nor a VM
   * directory on disk): removes what the node holds only for VMs (the VM network, the cgroup
   * parent), so an uninstalled agent leaves nothing behind. A new agent creates them again at start.
   */
  readonly releaseNodeWhenIdle?: () => Promise<void>;
  /**
   * Removes everything in the state directory (image cache, setup key, VM directories): what an
   * uninstall asks of a node with no VM left, unless it keeps the state for a later install.
   */
  readonly removeNodeState?: () => Promise<void>;
  readonly imageCache: () => Promise<{ readonly images: number; readonly usedBytes: number; readonly limitBytes?: number }>;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly registry?: Registry;
  /** Health and metrics server port; 0 = any free port, undefined = none. */
  readonly healthPort?: number;
  readonly healthHost?: string | undefined;
  readonly renewIntervalMs?: number | undefined;
  /** How long a cache clone waits for the operator's decision after its VM ended (default 15 min). */
  readonly cacheHoldMs?: number | undefined;
  readonly sweep?: { readonly intervalMs?: number; readonly cgroup?: SupervisorCgroupOptions | undefined; readonly sweepNetwork?: ((live: LiveSet) => Promise<readonly string[]>) | undefined; readonly sweepSnapshots?: (() => Promise<readonly string[]>) | undefined };
  /**
   * The fault points of the failure-proof suite (docs/failure-proof-points.md): `imp agent` reads
   * them from IMP_TEST_FAULT_POINTS, which nothing but the suite sets. Default: none.
   */
  readonly faults?: FaultPoints | undefined;
}

export class NodeAgent {
  readonly runtime: VmRuntime;
  readonly #caches: CacheVolumes;
  readonly #settler: CacheSettler;
  readonly metrics: AgentMetrics;
  readonly registry: Registry;
  readonly vms: ResourceClient<ImpVM>;
  readonly reporter: NodeReporter;
  readonly health: HealthServer | undefined;
  readonly sweeper: NodeSweeper;
  /** The fault points this agent hits (tests read `hits`). */
  readonly faults: FaultPoints;
  readonly #o: NodeAgentOptions;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #templates: ResourceClient<ImpVMTemplate>;
  readonly #classes: ResourceClient<ImpVMClass>;
  readonly #cache: Informer<ImpVM>;
  readonly #controller: Controller;
  readonly #events: EventRecorder;
  /** One record per VM bound here, by `namespace/name`; the runtime holds its task. Both go at Forget. */
  readonly #vms = new Map<string, NodeVm>();
  readonly #setups: KubeSetupStore;
  readonly #setupWaitMs: number;
  readonly #startedAtMs: number;
  /** The decommission request last logged as ignored, so a leftover is logged once, not every round. */
  #ignoredRequestAt: number | undefined;

  constructor(options: NodeAgentOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.#startedAtMs = this.#clock.now();
    this.#log = options.logger.child({ node: options.nodeName });
    this.registry = options.registry ?? new Registry();
    this.metrics = new AgentMetrics(this.registry, options.runtime.stateDir);
    const kc = options.kubeConfig;
    this.vms = createResourceClient<ImpVM>(kc, IMP_VMS);
    this.#templates = createResourceClient<ImpVMTemplate>(kc, IMP_VM_TEMPLATES);
    this.#classes = createResourceClient<ImpVMClass>(kc, IMP_VM_CLASSES);
    this.#events = new EventRecorder({ client: createResourceClient<CoreEvent>(kc, EVENT_RESOURCE), component: "imp-agent", instance: options.nodeName, clock: this.#clock });
    this.faults = options.faults ?? NO_FAULTS;
    this.#setupWaitMs = options.runtime.timeouts?.setupWaitMs ?? DEFAULT_RUNTIME_TIMEOUTS.setupWaitMs;
    this.#cache = new Informer<ImpVM>({ client: this.vms, fieldSelector: `status.nodeName=${options.nodeName}`, resyncPeriodMs: 5 * 60_000, clock: this.#clock, logger: this.#log });
    this.#setups = new KubeSetupStore({ vms: this.vms, lastSeen: (vm) => this.#vms.get(`${vm.namespace}/${vm.name}`)?.seen });
    this.#caches = options.runtime.caches ?? new CacheVolumes(options.runtime.stateDir);
    this.#settler = new CacheSettler({ caches: this.#caches, vmCache: this.#cache, vms: this.vms, clock: this.#clock, logger: this.#log, onSettled: (result) => this.metrics.onRuntimeEvent({ kind: "cache", result }), ...(options.cacheHoldMs === undefined ? {} : { holdMs: options.cacheHoldMs }) });
    this.runtime = new VmRuntime({
      ...options.runtime,
      caches: this.#caches,
      clock: this.#clock,
      logger: this.#log,
      setups: this.#setups,
      notify: (vm) => this.#controller.enqueue(`${vm.namespace}/${vm.name}`),
      observe: (event) => this.metrics.onRuntimeEvent(event, event.kind === "ended" ? (this.#vms.get(`${event.vm.namespace}/${event.vm.name}`)?.seen.metadata.labels?.[LABELS.pool] ?? "") : ""),
      // Reported at once, not at the next round: the scheduler counts the template's room sooner.
      onTemplatesChanged: () => void this.reporter.writeStatus().catch(() => undefined),
      faults: this.faults,
      templateRoom: (want) => {
        // VMs bound here and not started yet hold room too (their size is not known before their
        // plan: counted as the template's, usually the class that missed it).
        const waiting = [...this.#vms.values()].filter(({ seen }) => this.runtime.local(seen.metadata.uid) === undefined && !isTerminalVMPhase(seen.status?.phase ?? "Scheduled")).length;
        return fitsBeside(options.facts.capacity, this.#allocated(), { vcpu: want.vcpu * (1 + waiting), memoryMiB: want.memoryMiB * (1 + waiting), vmSlots: 1 + waiting });
      },
    });
    this.#controller = new Controller({ name: "imp-agent-vm", registry: this.registry, workers: 4, logger: this.#log, clock: this.#clock, reconcile: (ctx) => this.#reconcile(ctx), reconcileTimeoutMs: 120_000 });
    this.#controller.watch(this.#cache);
    this.reporter = new NodeReporter({
      nodeName: options.nodeName,
      nodes: createResourceClient<ImpNode>(kc, IMP_NODES),
      leases: createResourceClient<Lease>(kc, LEASE_RESOURCE),
      leaseNamespace: options.leaseNamespace,
      facts: options.facts,
      key: options.key,
      allocated: () => this.#allocated(),
      heldByTemplates: () => this.runtime.templatesHeld(),
      imageCache: options.imageCache,
      clock: this.#clock,
      logger: this.#log,
      ...(options.renewIntervalMs === undefined ? {} : { renewIntervalMs: options.renewIntervalMs }),
      decommission: (request) => this.#decommission(request),
    });
    this.sweeper = new NodeSweeper({
      vmsDir: join(options.runtime.stateDir, "vms"),
      liveUids: () => this.#liveUids(),
      clock: this.#clock,
      logger: this.#log,
      ...(options.sweep?.intervalMs === undefined ? {} : { intervalMs: options.sweep.intervalMs }),
      cgroup: options.sweep?.cgroup,
      sweepNetwork: options.sweep?.sweepNetwork,
      sweepSnapshots: options.sweep?.sweepSnapshots,
      onSwept: (r) => {
        for (const [kind, n] of [["process", r.processes], ["supervisor", r.supervisors], ["cgroup", r.cgroups], ["dir", r.dirs], ["tap", r.taps], ["snapshot", r.snapshots]] as const) if (n > 0) this.metrics.sweepRemoved.inc({ kind }, n);
      },
    });
    this.health = options.healthPort === undefined ? undefined : new HealthServer({ registry: this.registry, caches: { impvms: this.#cache }, port: options.healthPort, ...(options.healthHost === undefined ? {} : { host: options.healthHost }), logger: this.#log });
  }

  /** Runs until `signal` aborts. VMs keep running when the agent stops (they are re-adopted on start). */
  async start(signal: AbortSignal): Promise<void> {
    // Before any VM of this run makes a clone or a generation: what a crash left half-written.
    const swept = await this.#caches.sweep();
    if (swept.length > 0) this.#log.info({ files: swept }, "removed partial cache files an earlier run left");
    await this.reporter.reportOnce(signal);
    const manager = new Manager({ logger: this.#log }).addCache(this.#cache).addController(this.#controller).addServer({ start: (s) => this.reporter.start(s) }).addServer(this.sweeper).addServer(this.#settler);
    if (this.health !== undefined) manager.addHealthServer(this.health);
    await manager.start(signal);
    await this.#releaseNodeIfIdle();
  }

  /**
   * After a stop: an agent that leaves VMs running (an upgrade, a restart) keeps their network and
   * cgroups for the next agent to adopt; one that leaves none (an uninstall, a drained node) removes them.
   */
  async #releaseNodeIfIdle(): Promise<void> {
    const release = this.#o.releaseNodeWhenIdle;
    if (release === undefined) return;
    const { running, onDisk } = await this.#vmsOnNode();
    if (running > 0 || onDisk > 0) {
      this.#log.info({ running, vmDirectories: onDisk }, "VMs stay on the node for the next agent to adopt");
      return;
    }
    try {
      await release();
      this.#log.info("no VM on the node: removed the node's VM network and cgroup parent");
    } catch (err) {
      this.#log.warn({ error: describeError(err) }, "cannot remove the node's VM network or cgroup parent");
    }
  }

  /** VMs the node still holds: running in the runtime (not yet released) and VM directories on disk. */
  async #vmsOnNode(): Promise<{ readonly running: number; readonly onDisk: number }> {
    const running = [...this.runtime.liveUids()].filter((uid) => this.runtime.local(uid)?.stage !== "released").length;
    const onDisk = (await readdir(VmDir.vmsDir(this.#o.runtime.stateDir)).catch(() => [])).length;
    return { running, onDisk };
  }

  /** An uninstall asked this node to go (its ImpNode's annotation): decide, then remove the state directory if told to. */
  async #decommission(request: DecommissionRequest): Promise<DecommissionOutcome> {
    const { running, onDisk } = await this.#vmsOnNode();
    const decision = decideDecommission({ request, agentStartedAtMs: this.#startedAtMs, vmsOnNode: Math.max(running, onDisk) });
    switch (decision.kind) {
      case "ignore":
        if (this.#ignoredRequestAt !== request.requestedAtMs) this.#log.info({ why: decision.why }, "decommission request ignored");
        this.#ignoredRequestAt = request.requestedAtMs;
        return "ignored";
      case "wait":
        this.#log.info({ vms: decision.vms }, "decommission asked: waiting for the node's VMs to end");
        return "waiting";
      case "retire":
        if (decision.wipeState) await this.#o.removeNodeState?.();
        this.#log.info({ stateRemoved: decision.wipeState && this.#o.removeNodeState !== undefined }, "decommissioned: no VM on the node");
        return "retired";
    }
  }

  /** VMs whose node resources must stay: bound here and not released, or held by the runtime. */
  #liveUids(): Set<string> {
    const live = new Set<string>();
    for (const vm of this.#cache.list()) {
      const uid = vm.metadata.uid;
      if (uid === undefined || vm.status?.nodeName !== this.#o.nodeName) continue;
      const released = (vm.status.phase === "Succeeded" || vm.status.phase === "Failed") && !hasFinalizer(vm, FINALIZERS.vmTeardown);
      if (!released) live.add(uid);
    }
    for (const uid of this.runtime.liveUids()) if (this.runtime.local(uid)?.stage !== "released") live.add(uid);
    return live;
  }

  #allocated(): { vcpu: number; memoryMiB: number; vmSlots: number } {
    let vcpu = 0;
    let memoryMiB = 0;
    let vmSlots = 0;
    for (const { seen } of this.#vms.values()) {
      const local = this.runtime.local(seen.metadata.uid);
      if (local === undefined || local.stage === "released" || local.stage === "ended") continue;
      // Its boot request's size, or a re-adopted VM's record's.
      const held = this.runtime.held(seen.metadata.uid);
      vcpu += held?.vcpu ?? 0;
      memoryMiB += held?.memoryMiB ?? 0;
      vmSlots += 1;
    }
    return { vcpu, memoryMiB, vmSlots };
  }

  async #reconcile(ctx: ReconcileContext): Promise<ReconcileResult> {
    const cached = this.#cache.get(ctx.key) as Readonly<Stored<ImpVM>> | undefined;
    const vm = cached !== undefined && cached.status?.nodeName === this.#o.nodeName ? cached : undefined;
    let record = this.#vms.get(ctx.key);
    if (vm !== undefined) {
      if (record === undefined || record.seen.metadata.uid !== vm.metadata.uid) this.#vms.set(ctx.key, (record = { seen: vm, adoptTried: false }));
      record.seen = vm;
    }
    if (record === undefined) return done;
    const known = record.seen;
    const uid = known.metadata.uid;
    let local = this.runtime.local(uid);
    if (local === undefined && vm !== undefined && apiSituation(vm) === "active" && !record.adoptTried) {
      // Booted by an earlier run of this agent: re-adopt it before anything is decided about it.
      record.adoptTried = true;
      if (await this.runtime.adopt(refOf(vm), localSetupOf(vm))) local = this.runtime.local(uid);
    }
    const decision = decideVm({ vm, local, nowMs: this.#clock.now(), setupWaitMs: this.#setupWaitMs });
    for (const action of decision.actions) await this.#act(action, vm, record, ctx);
    this.#refreshPhaseGauge();
    return decision.requeueAfterMs === undefined ? done : requeueAfter(Math.max(1, decision.requeueAfterMs));
  }

  async #act(action: AgentAction, vm: Readonly<Stored<ImpVM>> | undefined, record: NodeVm, ctx: ReconcileContext): Promise<void> {
    const known = record.seen;
    const ref = { namespace: known.metadata.namespace, name: known.metadata.name };
    const uid = known.metadata.uid;
    switch (action.type) {
      case "AddFinalizer":
        await addFinalizer(this.vms, ref, FINALIZERS.vmTeardown, ctx.signal);
        return;
      case "Start": {
        if (vm === undefined) return;
        let plan: VmPlan;
        try {
          plan = await this.#plan(vm, ctx.signal);
        } catch (err) {
          if (err instanceof ImpError && err.errorClass !== "terminal") throw err;
          this.#log.warn({ vm: ctx.key, error: describeError(err) }, "cannot plan the VM");
          this.runtime.failBeforeStart(refOf(vm), { succeeded: false, reason: VM_REASONS.PrepareFailed, message: describeError(err) });
          this.#controller.enqueue(ctx.key);
          return;
        }
        this.runtime.start(refOf(vm), bootRequestOf(plan, this.#o.chooseVmm(plan)));
        await this.#events.record(vm, { type: "Normal", reason: "Preparing", message: `Preparing disks from ${plan.image} on node ${this.#o.nodeName}` });
        return;
      }
      case "DeliverSetup":
        if (vm !== undefined) await this.#deliverSetup(vm);
        return;
      case "Stop":
        this.runtime.stop(uid, action.reason, action.message);
        await this.#events.record(known, { type: "Normal", reason: "Stopping", message: `Stopping the VM: ${action.message}` });
        return;
      case "Release":
        await this.runtime.release(refOf(known));
        return;
      case "PatchStatus":
        if (vm === undefined) return;
        await this.#patchStatus(vm, action.status, this.runtime.local(uid), ctx.signal);
        return;
      case "RemoveFinalizer":
        await removeFinalizer(this.vms, ref, FINALIZERS.vmTeardown, ctx.signal);
        return;
      case "Forget":
        this.runtime.forget(uid);
        this.#vms.delete(ctx.key);
        return;
    }
  }

  /** Writes the status local knowledge implies, recomputed on the freshest object so a retry never rewinds anything. */
  async #patchStatus(vm: Readonly<Stored<ImpVM>>, decided: ImpVMStatus, local: LocalVm | undefined, signal: AbortSignal): Promise<void> {
    const before = vm.status?.phase ?? "Pending";
    let after = before;
    // Points of the job's timeline this very write adds (judged on the freshest object, so never twice).
    let gained = { booted: false, delivered: false };
    const stored = await mutateWithRetry(this.vms, {
      ref: { namespace: vm.metadata.namespace, name: vm.metadata.name },
      subresource: "status",
      signal,
      mutate: (d) => {
        const current = d.status ?? {};
        const want = local === undefined ? forwardOnly(current, decided) : statusFromLocal(current, local);
        gained = { booted: false, delivered: false };
        if (want === undefined) return false;
        gained = { booted: current.bootDurationMs === undefined && want.bootDurationMs !== undefined, delivered: current.setup?.deliveredAt === undefined && want.setup?.deliveredAt !== undefined };
        d.status = want;
      },
    }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    after = stored?.status?.phase ?? before;
    if (stored !== undefined && gained.booted) await this.#events.record(stored, { type: "Normal", reason: "Booted", message: `The guest agent answered ${stored.status?.bootDurationMs ?? 0} ms after the VMM started` });
    if (stored !== undefined && gained.delivered) await this.#events.record(stored, { type: "Normal", reason: "SetupDelivered", message: "The guest started the runner with its one-time setup" });
    if (stored !== undefined && after !== before) {
      const warning = after === "Failed";
      const st = stored.status ?? {};
      await this.#events.record(stored, {
        type: warning ? "Warning" : "Normal",
        reason: after === "Succeeded" || after === "Failed" ? (st.reason ?? after) : after,
        message: phaseMessage(after, st),
      });
    }
  }

  async #plan(vm: Readonly<Stored<ImpVM>>, signal: AbortSignal): Promise<VmPlan> {
    const namespace = vm.metadata.namespace ?? "default";
    const template = vm.spec.templateRef === undefined ? undefined : (await this.#templates.get({ namespace, name: vm.spec.templateRef.name }, signal).catch(notFoundAs(`template ${vm.spec.templateRef.name}`))).spec;
    const t = templateOf(vm, template);
    const vmClass = (await this.#classes.get({ name: t.classRef.name }, signal).catch(notFoundAs(`ImpVMClass ${t.classRef.name}`))).spec;
    const secrets = secretKeysNeeded(vm, t).size === 0 ? new Map<string, Readonly<Record<string, string>>>() : await this.#openInputs(vm);
    const plan = planVm({ vm, template, vmClass, secrets, kernels: this.#o.kernels, baseEnv: this.#o.baseEnv ?? DEFAULT_WORKLOAD_ENV });
    return withImageCredentials(plan, secrets);
  }

  /**
   * The Secret values the VM reads, which the operator sealed to this node (agents cannot read
   * Secrets): opened in memory only. Not sealed yet is retried, up to the same bound a booted VM
   * waits for its setup; then the VM fails with the reason.
   */
  async #openInputs(vm: Readonly<Stored<ImpVM>>): Promise<Map<string, Readonly<Record<string, string>>>> {
    const sealed = vm.status?.inputs?.sealed;
    if (sealed === undefined) {
      const bound = Date.parse(vm.status?.phaseTimestamps?.scheduled ?? "");
      if (Number.isFinite(bound) && this.#clock.now() - bound > this.#setupWaitMs) {
        throw terminalError("InputsNotSealed", `Cannot plan the VM: the operator did not seal its Secret inputs to node ${this.#o.nodeName} within ${Math.round(this.#setupWaitMs / 1000)} s of binding (see the VM's InputsNotSealed events and the operator's log)`);
      }
      throw retryableError("InputsNotSealed", `Cannot plan ${vm.metadata.name} yet: its Secret inputs are not sealed to this node yet`);
    }
    const plain = await openSetup(parseSealedSetup(sealed, "inputs"), this.#o.key, vm.metadata.uid, "inputs");
    try {
      return new Map(Object.entries(parseVmInputs(Buffer.from(plain).toString("utf8")).secrets));
    } finally {
      plain.fill(0);
    }
  }

  /**
   * Opens the setup the operator sealed to this node and hands it to the VM awaiting it; the
   * plaintext lives only in that call and the Exec. A Secret that is not there yet (the status said
   * Minted before the Secret reached us) is retried; one that cannot be used stops the VM.
   */
  async #deliverSetup(vm: Readonly<Stored<ImpVM>>): Promise<void> {
    const uid = vm.metadata.uid;
    let setup: string;
    try {
      const raw = await this.#setups.readSealed(refOf(vm));
      if (raw === undefined) throw retryableError("SetupSecretMissing", `Cannot deliver the setup of ${vm.metadata.name}: the status says Minted but holds no sealed setup yet`);
      const plain = await openSetup(parseSealedSetup(raw), this.#o.key, uid);
      try {
        setup = Buffer.from(plain).toString("utf8");
      } finally {
        plain.fill(0);
      }
    } catch (err) {
      if (err instanceof ImpError && err.errorClass === "retryable") throw err;
      this.runtime.stop(uid, VM_REASONS.SetupFailed, `Cannot open the one-time setup: ${describeError(err)}`);
      return;
    }
    this.runtime.deliverSetup(uid, setup);
  }

  #refreshPhaseGauge(): void {
    const counts = new Map<string, number>();
    for (const vm of this.#cache.list()) counts.set(vm.status?.phase ?? "Pending", (counts.get(vm.status?.phase ?? "Pending") ?? 0) + 1);
    for (const phase of ["Pending", "Scheduled", "Preparing", "Booting", "Running", "Succeeded", "Failed", "Terminating"]) this.metrics.vms.set({ phase }, counts.get(phase) ?? 0);
  }
}

/** What the agent knows of one VM bound here, besides the runtime's task. */
interface NodeVm {
  /** The object as last seen, so a VM that vanished can still be released by uid, name and namespace. */
  seen: Readonly<Stored<ImpVM>>;
  /** Re-adoption was tried once in this agent run (a VM an earlier run booted). */
  adoptTried: boolean;
}

function refOf(vm: Readonly<Stored<ImpVM>>): VmRef {
  return { uid: vm.metadata.uid, name: vm.metadata.name, namespace: vm.metadata.namespace ?? "" };
}

/** What the API says of a VM's setup handoff, as an adopted VM's local record needs it. */
function localSetupOf(vm: Readonly<Stored<ImpVM>>): LocalSetupState {
  const state = vm.status?.setup?.state;
  return state === "Sent" ? "sent" : state === "Delivered" ? "delivered" : "none";
}

function forwardOnly(current: Readonly<ImpVMStatus>, want: ImpVMStatus): ImpVMStatus | undefined {
  const from = current.phase ?? "Pending";
  if (want.phase !== undefined && !canTransitionVM(from, want.phase)) return undefined;
  if (want.phase === from) return undefined;
  return { ...current, ...want };
}

function phaseMessage(phase: string, status: Readonly<ImpVMStatus>): string {
  switch (phase) {
    case "Preparing":
      return "Preparing the VM's disks";
    case "Booting":
      return `VMM ${status.vmm ?? ""} started${status.prepareDurationMs === undefined ? "" : ` after ${status.prepareDurationMs} ms of preparation`}`;
    case "Running":
      return `Workload started${status.bootDurationMs === undefined ? "" : `; the guest answered ${status.bootDurationMs} ms after the VMM started`}`;
    default:
      return status.message ?? phase;
  }
}

function notFoundAs(what: string): (err: unknown) => never {
  return (err) => {
    if (isNotFound(err)) throw terminalError("PlanInputNotFound", `Cannot plan the VM: ${what} does not exist`, { cause: err });
    throw err;
  };
}
