/**
 * The act side of the node agent for VMs: one task per VM that prepares its disks, boots its VMM,
 * connects to its guest agent, hands over its workload (and setup), and waits for it to end; plus
 * stop and release. Each task reports into its LocalVm and pokes the controller (`notify`), which
 * decides from there. Boot is a list of named steps whose cleanups are registered as each resource
 * is acquired, so a failure at any step leaves nothing behind.
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, rm } from "node:fs/promises";
import { join } from "node:path";
import { openSetup, parseSealedSetup, SETUP_SECRET, VM_REASONS, type ImpVM, type NodeKeyPair, type SealedSetup } from "../../api/index.ts";
import { describeError, ImpError, NO_FAULTS, runSteps, terminalError, type Clock, type FaultPoints, type Logger, type Step, type StepRun } from "../../shared/index.ts";
import type { ExecOutcome, GuestClient, NetworkConfig } from "../guest/index.ts";
import type { CachedImage } from "../image/cache/index.ts";
import type { CredentialLookup } from "../image/pull/index.ts";
import type { VmDisks } from "../image/disks/index.ts";
import type { ProcessLauncher, RunningVm, VmmDriver, VmmKind, VmmProcess, VmSpec } from "../vmm/types.ts";
import { readVmRecord } from "../vmm/qemu/index.ts";
import { connectGuest, isGuestMisbehaviour } from "./guest-connection.ts";
import { handOffExec, workloadExecId } from "./exec-handoff.ts";
import { newLocalVm, type LocalVm, type VmOutcome } from "./local-vm.ts";
import type { VmPlan } from "./vm-plan.ts";

/** A VM's network on this node: its tap, and the guest side handed over by the guest agent's configure. */
export interface VmNetworkLease {
  readonly tap: string;
  readonly mac: string;
  readonly guest: NetworkConfig;
}

export interface VmNetworkProvider {
  attach(vmId: string, policy: { readonly egress: VmPlan["egress"]; readonly allowedCIDRs: readonly string[] }): Promise<VmNetworkLease>;
  /** Idempotent: detaching a VM that has no network is a no-op. */
  detach(vmId: string): Promise<void>;
}

export interface VmImageSource {
  ensure(request: { readonly image: string; readonly extraLayers: readonly string[]; readonly credentials?: CredentialLookup }, signal?: AbortSignal): Promise<CachedImage>;
  disks(vmDir: string, image: CachedImage, scratchBytes: number): Promise<VmDisks>;
}

export interface RuntimeTimeouts {
  /** VMM start → guest hello. */
  readonly bootMs: number;
  /** Graceful stop before kill. */
  readonly stopGraceMs: number;
  /** A runner VM waits this long for its sealed setup. */
  readonly setupWaitMs: number;
  /** One guest request. */
  readonly requestMs: number;
  /** After the workload exited, how long the guest may take to power off before it is stopped. */
  readonly powerOffMs: number;
}

export const DEFAULT_RUNTIME_TIMEOUTS: RuntimeTimeouts = { bootMs: 120_000, stopGraceMs: 10_000, setupWaitMs: 300_000, requestMs: 30_000, powerOffMs: 15_000 };

export interface VmRuntimeOptions {
  readonly stateDir: string;
  readonly images: VmImageSource;
  readonly drivers: ReadonlyMap<VmmKind, VmmDriver>;
  /** Which VMM boots this VM here (node config, class preference, KVM). */
  readonly chooseVmm: (plan: VmPlan) => VmmKind;
  /** The kernel command line for a plan (root, init, console, scratch device, tsc…). */
  readonly cmdline: (plan: VmPlan, vmm: VmmKind) => string;
  /** Whether a driver's guest channel is virtio-serial (one connection at a time, hello may be lost). */
  readonly serialChannel: (vmm: VmmKind) => boolean;
  /** How this VM's processes are started: directly, or under its own supervisor (outlives an agent restart). */
  readonly launcherFor: (plan: VmPlan, vmDir: string) => ProcessLauncher;
  readonly network?: VmNetworkProvider;
  readonly nodeKey: NodeKeyPair;
  /** The setup Secret's sealed envelope, or undefined while it does not exist. */
  readonly readSealedSetup: (vm: Readonly<ImpVM>) => Promise<string | undefined>;
  /** Records in the API that the Exec is about to be sent (ambiguous-handoff rule). Must not return before it is stored. */
  readonly recordSetupSent: (vm: Readonly<ImpVM>, execId: string) => Promise<void>;
  readonly deleteSetupSecret: (vm: Readonly<ImpVM>) => Promise<void>;
  /** Pokes the controller to look at this VM again. */
  readonly notify: (vm: Readonly<ImpVM>) => void;
  /** Supervised processes left in a VM directory by an earlier agent run (to stop them on release). */
  readonly adoptOrphans?: (vmDir: string) => Promise<readonly VmmProcess[]>;
  /** Allocates a guest CID unique on this node. */
  readonly allocateCid: (uid: string) => number;
  readonly releaseCid: (uid: string) => void;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly timeouts?: Partial<RuntimeTimeouts>;
  /** Called for every delivered setup and every boot/prepare measurement (metrics). */
  readonly observe?: (event: RuntimeEvent) => void;
  /** Test fault points agent.* and teardown.before-secret-delete (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
}

export type RuntimeEvent =
  | { readonly kind: "prepared"; readonly ms: number }
  | { readonly kind: "booted"; readonly ms: number; readonly vmm: VmmKind }
  | { readonly kind: "setup-delivered" }
  | { readonly kind: "ended"; readonly outcome: VmOutcome; readonly runMs?: number }
  | { readonly kind: "failed"; readonly code: string };

interface BootState {
  readonly plan: VmPlan;
  readonly dir: string;
  image?: CachedImage;
  disks?: VmDisks;
  lease?: VmNetworkLease;
  vmm?: VmmKind;
  vm?: RunningVm;
  client?: GuestClient;
  setup?: string;
}

class VmTask {
  local: LocalVm;
  latest: Readonly<ImpVM>;
  readonly abort = new AbortController();
  readonly vmUpdated = new EventTarget();
  stopRequest: { readonly reason: string; readonly message: string } | undefined;
  state: BootState | undefined;
  run: StepRun | undefined;
  done: Promise<void> = Promise.resolve();
  pid: number | undefined;

  constructor(vm: Readonly<ImpVM>, local: LocalVm) {
    this.latest = vm;
    this.local = local;
  }
}

export class VmRuntime {
  readonly #o: VmRuntimeOptions;
  readonly #t: RuntimeTimeouts;
  readonly #tasks = new Map<string, VmTask>();
  readonly #faults: FaultPoints;

  constructor(options: VmRuntimeOptions) {
    this.#o = options;
    this.#t = { ...DEFAULT_RUNTIME_TIMEOUTS, ...options.timeouts };
    this.#faults = options.faults ?? NO_FAULTS;
  }

  vmDir(uid: string): string {
    return join(this.#o.stateDir, "vms", uid);
  }

  local(uid: string): LocalVm | undefined {
    return this.#tasks.get(uid)?.local;
  }

  /** VMs this runtime holds (for capacity accounting and the sweep). */
  liveUids(): string[] {
    return [...this.#tasks.keys()];
  }

  /** The controller saw a newer version of the VM (the setup waiter may be waiting for it). */
  observe(vm: Readonly<ImpVM>): void {
    const task = this.#tasks.get(vm.metadata.uid ?? "");
    if (task === undefined) return;
    task.latest = vm;
    task.vmUpdated.dispatchEvent(new Event("updated"));
  }

  /** Starts preparing and booting `vm` per `plan`. Returns at once; progress arrives through `notify`. */
  start(vm: Readonly<ImpVM>, plan: VmPlan): void {
    if (this.#tasks.has(plan.uid)) return;
    const task = new VmTask(vm, { ...newLocalVm(plan.uid), at: { preparing: this.#o.clock.now() } });
    this.#tasks.set(plan.uid, task);
    task.done = this.#lifecycle(task, plan);
    this.#o.notify(vm); // so Preparing reaches the API now, not at the next step
  }

  /** Records a VM that failed before it could start (e.g. its plan is invalid): ended, nothing to free. */
  failBeforeStart(vm: Readonly<ImpVM>, outcome: VmOutcome): void {
    const uid = vm.metadata.uid ?? "";
    if (this.#tasks.has(uid)) return;
    const task = new VmTask(vm, { ...newLocalVm(uid), stage: "ended", outcome, at: { ended: this.#o.clock.now() } });
    this.#tasks.set(uid, task);
    this.#o.observe?.({ kind: "failed", code: outcome.reason });
  }

  /** Stops the VM (graceful, then kill). The outcome is `reason` unless the VM already ended on its own. */
  stop(uid: string, reason: string, message: string): void {
    const task = this.#tasks.get(uid);
    if (task === undefined || task.local.stage === "ended" || task.local.stage === "released" || task.local.stage === "stopping") return;
    task.stopRequest = { reason, message };
    task.local = { ...task.local, stage: "stopping" };
    task.abort.abort(terminalError("VmStopped", `VM stopped: ${message}`));
    void task.state?.vm?.stop(this.#t.stopGraceMs);
  }

  /**
   * Frees everything of the VM on this node: VMM stopped and verified gone, guest channel closed,
   * tap detached, disks and directory removed, setup Secret deleted. Idempotent, also for VMs this
   * runtime never ran (files of an earlier agent run).
   */
  async release(vm: Readonly<ImpVM>): Promise<void> {
    const uid = vm.metadata.uid ?? "";
    let task = this.#tasks.get(uid);
    if (task === undefined) {
      task = new VmTask(vm, { ...newLocalVm(uid), stage: "ended", outcome: { succeeded: false, reason: VM_REASONS.Deleted, message: "released without a local record" } });
      this.#tasks.set(uid, task);
    }
    if (task.local.stage === "released") return;
    if (task.local.stage === "starting" || task.local.stage === "running") this.stop(uid, VM_REASONS.Deleted, "released");
    await task.done;
    await task.run?.rollback();
    await task.state?.vm?.stop(this.#t.stopGraceMs);
    // Processes of an earlier agent run that nobody re-adopted: stopped here, never left running.
    const orphans = task.state === undefined ? await this.#o.adoptOrphans?.(this.vmDir(uid)) : undefined;
    let orphansGone = true;
    for (const p of orphans ?? []) {
      await p.stop(this.#t.stopGraceMs);
      orphansGone &&= !p.running;
    }
    await this.#o.network?.detach(uid);
    await rm(this.vmDir(uid), { recursive: true, force: true });
    this.#o.releaseCid(uid);
    const processGone = orphansGone && (task.pid === undefined || isProcessGone(task.pid));
    await this.#faults.hit("teardown.before-secret-delete");
    await this.#o.deleteSetupSecret(vm);
    task.local = { ...task.local, stage: "released", processGone, resourcesReleased: true, at: { ...task.local.at, released: this.#o.clock.now() } };
    this.#o.notify(task.latest);
  }

  /**
   * After an agent restart: re-adopts a VM an earlier run of this agent booted, from its VM record and
   * its supervised processes, reconnects to its guest and follows its workload — asking the guest for
   * the state of the one exec id, never sending anything again. A VM whose VMM ended while the agent
   * was down ends with the exit its guest agent wrote to the console, or VmmExited. Returns false
   * when there is nothing to re-adopt (no record): the caller then fails the VM.
   */
  async resume(vm: Readonly<ImpVM>): Promise<boolean> {
    const uid = vm.metadata.uid ?? "";
    if (this.#tasks.has(uid)) return true;
    const vmDir = this.vmDir(uid);
    const vmmDir = join(vmDir, "vmm");
    const record = await readVmRecord(vmmDir).catch(() => undefined);
    if (record === undefined) return false;
    const setupState = vm.status?.setup?.state;
    const local: LocalVm = {
      ...newLocalVm(uid),
      stage: "running",
      vmm: record.driver,
      setup: setupState === "Sent" ? "sent" : setupState === "Delivered" ? "delivered" : "none",
      at: {},
    };
    const task = new VmTask(vm, local);
    this.#tasks.set(uid, task);
    const log = this.#o.logger.child({ vm: `${vm.metadata.namespace ?? ""}/${vm.metadata.name ?? ""}`, uid });
    task.done = (async () => {
      const processes = (await this.#o.adoptOrphans?.(vmDir)) ?? [];
      const driver = this.#o.drivers.get(record.driver);
      let running: RunningVm;
      try {
        if (driver?.adopt === undefined || processes.length === 0 || processes.some((p) => !p.running)) throw terminalError("VmAdoptFailed", "the VMM is no longer running");
        running = await driver.adopt(record.spec, processes, { launcher: this.#o.launcherFor({ uid } as VmPlan, vmDir), clock: this.#o.clock, logger: log });
      } catch (err) {
        for (const p of processes) await p.stop(this.#t.stopGraceMs);
        const fromConsole = await exitFromConsole(record.driver === "qemu" ? join(vmmDir, "serial.log") : join(vmmDir, "console.log"), workloadExecId(uid));
        log.info({ error: describeError(err), exitCode: fromConsole?.exitCode }, "VM ended while the agent was away");
        this.#end(task, fromConsole ?? { succeeded: false, reason: VM_REASONS.VmmExited, message: `the VMM ended while the agent was not running (${describeError(err)})` }, log);
        return;
      }
      const state: BootState = { plan: { uid, name: vm.metadata.name ?? "", namespace: vm.metadata.namespace ?? "" } as VmPlan, dir: vmDir, vm: running, vmm: record.driver };
      task.state = state;
      task.pid = running.pid;
      task.run = { timings: [], rollback: async () => { state.client?.close(); await running.stop(this.#t.stopGraceMs); } };
      try {
        state.client = await connectGuest(running, { timeoutMs: this.#t.requestMs, serial: record.channel === "serial", clientName: "imp-agent" });
      } catch (err) {
        await running.stop(this.#t.stopGraceMs);
        this.#end(task, { succeeded: false, reason: VM_REASONS.GuestUnreachable, message: `re-adopted the VM but cannot reach its guest: ${describeError(err)}` }, log);
        return;
      }
      log.info("re-adopted a running VM");
      this.#o.notify(task.latest);
      const outcome = await this.#waitForEnd(task, state, log);
      const exited = outcome.reason !== VM_REASONS.GuestMisbehaved && (await Promise.race([running.exited().then(() => true), this.#o.clock.sleep(this.#t.powerOffMs).then(() => false)]));
      if (!exited) await running.stop(this.#t.stopGraceMs);
      this.#end(task, outcome, log);
    })();
    return true;
  }

  forget(uid: string): void {
    const task = this.#tasks.get(uid);
    if (task?.local.stage === "released") this.#tasks.delete(uid);
  }

  /** Stops every VM and waits (bounded by the stop grace) — for `imp run` and tests, not agent restarts. */
  async stopAll(): Promise<void> {
    for (const [uid] of this.#tasks) this.stop(uid, VM_REASONS.Deleted, "the agent is stopping every VM");
    await Promise.all([...this.#tasks.values()].map((t) => t.done));
  }

  async #lifecycle(task: VmTask, plan: VmPlan): Promise<void> {
    const log = this.#o.logger.child({ vm: `${plan.namespace}/${plan.name}`, uid: plan.uid });
    const state: BootState = { plan, dir: this.vmDir(plan.uid) };
    task.state = state;
    let failedStep = "";
    try {
      task.run = await runSteps(this.#bootSteps(task, log), state, { signal: task.abort.signal, logger: log, onFailure: (step) => (failedStep = step) });
    } catch (err) {
      this.#end(task, task.stopRequest === undefined ? outcomeOfBootFailure(failedStep, err) : stopped(task), log);
      return;
    }
    const outcome = await this.#waitForEnd(task, state, log);
    // The workload ended, nothing reported or freed yet. Only crash/delay mean something here; a fail is logged and passes.
    await this.#faults.hit("agent.after-exit", task.abort.signal).catch((err: unknown) => log.warn({ error: describeError(err) }, "fault at agent.after-exit"));
    // The guest powers off after reporting the exit; give it a bounded moment, then stop it. A guest
    // that misbehaved gets no moment: it is stopped at once.
    const vm = state.vm;
    if (vm !== undefined) {
      const exited = outcome.reason !== VM_REASONS.GuestMisbehaved && (await Promise.race([vm.exited().then(() => true), this.#o.clock.sleep(this.#t.powerOffMs).then(() => false)]));
      if (!exited) await vm.stop(this.#t.stopGraceMs);
    }
    this.#end(task, outcome, log);
  }

  #end(task: VmTask, outcome: VmOutcome, log: Logger): void {
    const now = this.#o.clock.now();
    task.local = { ...task.local, stage: "ended", outcome: task.local.outcome ?? outcome, at: { ...task.local.at, ended: now } };
    const runMs = task.local.at.running === undefined ? undefined : now - task.local.at.running;
    this.#o.observe?.({ kind: "ended", outcome: task.local.outcome ?? outcome, ...(runMs === undefined ? {} : { runMs }) });
    log.info({ reason: outcome.reason, exitCode: outcome.exitCode, succeeded: outcome.succeeded }, "vm ended");
    this.#o.notify(task.latest);
  }

  #progress(task: VmTask, patch: Partial<LocalVm>): void {
    task.local = { ...task.local, ...patch, at: { ...task.local.at, ...patch.at } };
    this.#o.notify(task.latest);
  }

  #bootSteps(task: VmTask, log: Logger): Step<BootState>[] {
    const o = this.#o;
    const t = this.#t;
    return [
      {
        name: "vm-dir",
        run: async (s, ctx) => {
          await mkdir(s.dir, { recursive: true, mode: 0o700 });
          ctx.onCleanup("remove vm dir", () => rm(s.dir, { recursive: true, force: true }));
        },
      },
      {
        name: "image",
        run: async (s, ctx) => {
          s.image = await o.images.ensure({ image: s.plan.image, extraLayers: s.plan.extraLayers, ...(s.plan.imageCredentials === undefined ? {} : { credentials: s.plan.imageCredentials }) }, ctx.signal);
        },
      },
      {
        name: "disks",
        run: async (s, ctx) => {
          if (s.image === undefined) throw terminalError("ImageMissing", "Cannot prepare disks: no image");
          await this.#faults.hit("agent.prepare", ctx.signal);
          s.disks = await o.images.disks(s.dir, s.image, s.plan.scratchBytes);
        },
      },
      {
        name: "network",
        run: async (s, ctx) => {
          if (s.plan.egress === "none" || o.network === undefined) return;
          ctx.onCleanup("detach network", () => o.network?.detach(s.plan.uid));
          s.lease = await o.network.attach(s.plan.uid, { egress: s.plan.egress, allowedCIDRs: s.plan.allowedCIDRs });
        },
      },
      {
        name: "vmm",
        run: async (s, ctx) => {
          const vmm = o.chooseVmm(s.plan);
          const driver = o.drivers.get(vmm);
          if (driver === undefined) throw terminalError("VmmUnavailable", `Cannot boot: this node has no ${vmm} driver`);
          s.vmm = vmm;
          const now = o.clock.now();
          this.#progress(task, { step: "booting", vmm, at: { booting: now } });
          if (task.local.at.preparing !== undefined) o.observe?.({ kind: "prepared", ms: now - task.local.at.preparing });
          if (s.disks === undefined) throw terminalError("DisksMissing", "Cannot boot: no disks");
          const cid = o.allocateCid(s.plan.uid);
          ctx.onCleanup("release cid", () => o.releaseCid(s.plan.uid));
          const spec: VmSpec = {
            name: s.plan.name,
            dir: join(s.dir, "vmm"),
            vcpus: s.plan.vcpus,
            memoryMiB: s.plan.memoryMiB,
            kernel: s.plan.kernel.kernel,
            ...(s.plan.kernel.initrd === undefined ? {} : { initrd: s.plan.kernel.initrd }),
            cmdline: o.cmdline(s.plan, vmm),
            drives: [
              { id: "root", path: s.disks.base, readOnly: true, isRoot: true },
              { id: "scratch", path: s.disks.scratch, readOnly: false, isRoot: false },
            ],
            ...(s.lease === undefined ? {} : { network: { tap: s.lease.tap, mac: s.lease.mac } }),
            guestCid: cid,
          };
          s.vm = await driver.start(spec, { launcher: o.launcherFor(s.plan, s.dir), clock: o.clock, logger: log }, ctx.signal);
          task.pid = s.vm.pid;
          const started = s.vm;
          ctx.onCleanup("stop vmm", async () => {
            await started.stop(t.stopGraceMs);
          });
        },
      },
      {
        name: "guest",
        run: async (s, ctx) => {
          if (s.vm === undefined || s.vmm === undefined) throw terminalError("VmMissing", "Cannot connect: no VM");
          await this.#faults.hit("agent.boot", ctx.signal);
          s.client = await connectGuest(s.vm, { timeoutMs: t.bootMs, serial: o.serialChannel(s.vmm), signal: ctx.signal, clientName: "imp-agent" });
          const client = s.client;
          ctx.onCleanup("close guest channel", () => client.close());
          const now = o.clock.now();
          this.#progress(task, { at: { guestReady: now } });
          if (task.local.at.booting !== undefined) o.observe?.({ kind: "booted", ms: now - task.local.at.booting, vmm: s.vmm });
        },
      },
      {
        name: "configure",
        run: async (s, ctx) => {
          if (s.client === undefined) throw terminalError("GuestMissing", "Cannot configure: no guest channel");
          await s.client.configure({ hostname: s.plan.name, entropySeed: randomBytes(64), ...(s.lease === undefined ? {} : { network: s.lease.guest }) }, { timeoutMs: t.requestMs, signal: ctx.signal });
          if (s.lease !== undefined) this.#progress(task, { guestIP: s.lease.guest.address.split("/")[0] ?? "" });
        },
      },
      {
        name: "setup",
        run: async (s, ctx) => {
          if (!s.plan.runner) return;
          this.#progress(task, { step: "awaiting-setup" });
          s.setup = await this.#waitForSetup(task, ctx.signal);
        },
      },
      {
        name: "exec",
        run: async (s, ctx) => {
          if (s.client === undefined || s.vm === undefined || s.vmm === undefined) throw terminalError("GuestMissing", "Cannot exec: no guest channel");
          this.#progress(task, { step: "delivering" });
          const execId = workloadExecId(s.plan.uid);
          const w = s.plan.workload;
          const env: Record<string, string> = { ...w.env };
          if (s.setup !== undefined) {
            env[SETUP_SECRET.envName] = s.setup;
            env[SETUP_SECRET.runnerInputEnvName] = s.setup;
          }
          delete s.setup; // only the Exec carries it from here
          const vm = s.vm;
          const vmm = s.vmm;
          const result = await handOffExec(
            {
              execId,
              argv: w.argv,
              env,
              ...(w.cwd === undefined ? {} : { cwd: w.cwd }),
              ...(w.uid === undefined || w.gid === undefined ? {} : { uid: w.uid, gid: w.gid }),
              shutdownAfterExit: vmm === "firecracker" ? "reboot" : "poweroff",
            },
            {
              client: s.client,
              requestTimeoutMs: t.requestMs,
              logger: log,
              faults: this.#faults,
              recordSent: async () => {
                ctx.signal.throwIfAborted();
                await o.recordSetupSent(task.latest, execId);
                // Only after the API holds "Sent": the controller derives status from this record.
                if (s.plan.runner) this.#progress(task, { setup: "sent" });
              },
              reconnect: async () => {
                s.client?.close();
                return connectGuest(vm, { timeoutMs: t.requestMs, serial: o.serialChannel(vmm), clientName: "imp-agent" });
              },
            },
          );
          s.client = result.client;
          const client = result.client;
          ctx.onCleanup("close guest channel", () => client.close());
          if (!result.delivered) {
            if (s.plan.runner) this.#progress(task, { setup: "failed" });
            throw terminalError("WorkloadStartFailed", `Cannot start the workload: ${result.error}`);
          }
          const now = o.clock.now();
          this.#progress(task, { stage: "running", setup: s.plan.runner ? "delivered" : task.local.setup, at: { running: now, ...(s.plan.runner ? { delivered: now } : {}) } });
          if (s.plan.runner) o.observe?.({ kind: "setup-delivered" });
          await this.#faults.hit("agent.running", ctx.signal);
        },
      },
    ];
  }

  /** Waits (bounded) until the operator minted the setup, then opens it in memory. */
  async #waitForSetup(task: VmTask, signal: AbortSignal): Promise<string> {
    const deadline = this.#o.clock.now() + this.#t.setupWaitMs;
    for (;;) {
      signal.throwIfAborted();
      const state = task.latest.status?.setup?.state;
      if (state === "Sent" || state === "Delivered") {
        // Another agent run already sent it: never again.
        throw terminalError("SetupAlreadySent", "Cannot deliver the setup: the API says it was already sent; a one-time setup is never sent twice");
      }
      if (state === "Failed" || state === "Deleted") throw terminalError("SetupFailed", `Cannot deliver the setup: its state is ${state}`);
      if (state === "Minted") {
        const raw = await this.#o.readSealedSetup(task.latest);
        if (raw !== undefined) return this.#open(parseSealedSetup(raw), task.latest);
      }
      const left = deadline - this.#o.clock.now();
      if (left <= 0) throw terminalError("SetupTimeout", `Cannot deliver the setup: none was minted within ${this.#t.setupWaitMs} ms`);
      await waitForEvent(task.vmUpdated, "updated", Math.min(left, 2_000), signal, this.#o.clock);
    }
  }

  async #open(sealed: SealedSetup, vm: Readonly<ImpVM>): Promise<string> {
    const plain = await openSetup(sealed, this.#o.nodeKey, vm.metadata.uid ?? "");
    try {
      return Buffer.from(plain).toString("utf8");
    } finally {
      plain.fill(0);
    }
  }

  async #waitForEnd(task: VmTask, state: BootState, log: Logger): Promise<VmOutcome> {
    const { vm, client } = state;
    if (vm === undefined || client === undefined) return { succeeded: false, reason: VM_REASONS.VmmExited, message: "no VM" };
    const execId = workloadExecId(state.plan.uid);
    const vmDown = new Promise<"down">((resolve) => {
      if (vm.downSignal.aborted) resolve("down");
      vm.downSignal.addEventListener("abort", () => resolve("down"), { once: true });
    });
    let outcome: ExecOutcome | "down";
    try {
      outcome = await Promise.race([client.waitForExit(execId, { signal: task.abort.signal }), vmDown]);
    } catch (err) {
      if (task.stopRequest !== undefined) return stopped(task);
      // A guest that broke the protocol gets no second channel: nothing it says can be trusted.
      if (isGuestMisbehaviour(err) || isGuestMisbehaviour(vm.downSignal.reason)) return misbehaved(vm.downSignal.aborted ? vm.downSignal.reason : err);
      // A VMM that died closes the channel first; its exit follows within moments.
      const vmmGone = await Promise.race([vm.exited().then(() => true), this.#o.clock.sleep(2_000).then(() => false)]);
      if (vmmGone || vm.downSignal.aborted) return { succeeded: false, reason: VM_REASONS.VmmExited, message: describeError(vm.downSignal.reason ?? err) };
      log.warn({ error: describeError(err) }, "lost the guest channel while the workload ran");
      // The exit may still be known to the guest: ask once over a fresh channel.
      try {
        const again = await connectGuest(vm, { timeoutMs: this.#t.requestMs, serial: this.#o.serialChannel(state.vmm ?? "qemu"), clientName: "imp-agent" });
        state.client = again;
        outcome = await Promise.race([again.waitForExit(execId, { signal: task.abort.signal }), vmDown]);
      } catch {
        return task.stopRequest !== undefined ? stopped(task) : { succeeded: false, reason: VM_REASONS.GuestUnreachable, message: `lost the guest channel while the workload ran: ${describeError(err)}` };
      }
    }
    if (outcome === "down") {
      if (task.stopRequest !== undefined) return stopped(task);
      if (isGuestMisbehaviour(vm.downSignal.reason)) return misbehaved(vm.downSignal.reason);
      return { succeeded: false, reason: VM_REASONS.VmmExited, message: describeError(vm.downSignal.reason) };
    }
    return outcomeOfExit(outcome);
  }
}

function misbehaved(err: unknown): VmOutcome {
  return { succeeded: false, reason: VM_REASONS.GuestMisbehaved, message: `the guest misbehaved and was stopped: ${describeError(err)}`.slice(0, 4000) };
}

function stopped(task: VmTask): VmOutcome {
  return { succeeded: false, reason: task.stopRequest?.reason ?? VM_REASONS.Deleted, message: task.stopRequest?.message ?? "stopped" };
}

export function outcomeOfExit(exit: ExecOutcome): VmOutcome {
  if (exit.state === "failed") return { succeeded: false, reason: VM_REASONS.WorkloadStartFailed, message: exit.error ?? "the workload could not start" };
  const code = exit.exitCode ?? 255;
  if (code === 0) return { succeeded: true, reason: VM_REASONS.Completed, message: "the workload exited 0", exitCode: 0 };
  return { succeeded: false, reason: VM_REASONS.ExitNonZero, message: `the workload exited ${code}${exit.signal === undefined ? "" : ` (${exit.signal})`}`, exitCode: code };
}

/** The reason a boot failed, by the step it failed in; the error's own code where it is more precise. */
export function outcomeOfBootFailure(step: string, err: unknown): VmOutcome {
  const code = err instanceof ImpError ? err.code : "Unknown";
  const message = `${step}: ${describeError(err)}`.slice(0, 4000);
  if (isGuestMisbehaviour(err)) return { succeeded: false, reason: VM_REASONS.GuestMisbehaved, message };
  const byCode: Record<string, string> = {
    BootTimeout: VM_REASONS.BootTimeout,
    GuestUnreachable: VM_REASONS.GuestUnreachable,
    ExecNotReceived: VM_REASONS.GuestUnreachable,
    SetupTimeout: VM_REASONS.SetupFailed,
    SetupAlreadySent: VM_REASONS.SetupFailed,
    SetupOpenFailed: VM_REASONS.SetupFailed,
    SetupSealedToOtherKey: VM_REASONS.SetupFailed,
    SetupSealedInvalid: VM_REASONS.SetupFailed,
    WorkloadStartFailed: VM_REASONS.WorkloadStartFailed,
  };
  const byStep: Record<string, string> = {
    "vm-dir": VM_REASONS.PrepareFailed,
    image: VM_REASONS.PrepareFailed,
    disks: VM_REASONS.PrepareFailed,
    network: VM_REASONS.PrepareFailed,
    vmm: VM_REASONS.VmmExited,
    guest: VM_REASONS.BootTimeout,
    configure: VM_REASONS.GuestUnreachable,
    setup: VM_REASONS.SetupFailed,
    exec: VM_REASONS.GuestUnreachable,
  };
  return { succeeded: false, reason: byCode[code] ?? byStep[step] ?? VM_REASONS.PrepareFailed, message };
}

function isProcessGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ESRCH";
  }
}

function waitForEvent(target: EventTarget, type: string, ms: number, signal: AbortSignal, clock: Clock): Promise<void> {
  return new Promise((resolve) => {
    const done = new AbortController();
    const finish = (): void => {
      done.abort();
      target.removeEventListener(type, finish);
      resolve();
    };
    target.addEventListener(type, finish, { once: true });
    signal.addEventListener("abort", finish, { once: true, signal: done.signal });
    clock.sleep(ms, done.signal).then(finish, () => undefined);
  });
}

/**
 * The workload's exit as the guest agent logged it on the VM's console (`msg="exec exited"
 * execId=… exitCode=N`), for a VM that ended while no agent listened. The console is the VM's own
 * word, like the exit event would have been; the last matching line counts.
 */
export async function exitFromConsole(path: string, execId: string): Promise<VmOutcome | undefined> {
  let text: string;
  try {
    const handle = await open(path, "r");
    try {
      const { size } = await handle.stat();
      const length = Math.min(size, 256 * 1024);
      const buffer = Buffer.alloc(length);
      await handle.read(buffer, 0, length, size - length);
      text = buffer.toString("utf8");
    } finally {
      await handle.close();
    }
  } catch {
    return undefined;
  }
  const pattern = new RegExp(`msg="exec exited" execId=${execId.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} exitCode=(\\d+)`, "g");
  let code: number | undefined;
  for (const m of text.matchAll(pattern)) code = Number(m[1]);
  if (code === undefined) return undefined;
  return { ...outcomeOfExit({ execId, state: "exited", exitCode: code }), message: `the workload exited ${code} while the agent was not running (from the guest's console)` };
}
