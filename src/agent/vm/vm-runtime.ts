/**
 * The act side of the node agent for VMs: one task per VM that runs its lifecycle (`lifecycle.ts`:
 * boot, or re-adoption after an agent restart), then follows it to its end; plus stop and release.
 * Each task reports into its {@link LocalVm} and pokes the controller (`notify`), which decides from
 * there; the runtime never reads API objects. The one thing it waits on from outside, the one-time
 * setup, arrives when the controller's decision says so (`deliverSetup`).
 */
import { rm } from "node:fs/promises";
import { VM_REASONS } from "../../api/index.ts";
import { describeError, ImpError, NO_FAULTS, retryableError, processState, terminalError, type Clock, type FaultPoints, type Logger, type StepRun } from "../../shared/index.ts";
import type { RunningVm, VmmKind, VmmProcess } from "../vmm/index.ts";
import type { CacheVolumes } from "../cache/index.ts";
import { readAdoptionFacts, type AdoptionFacts, type BootDeps, type BootStepName } from "./boot-steps.ts";
import { workloadExecId } from "./exec-handoff.ts";
import { firstExitRecord } from "../guest/index.ts";
import { adoptPipeline, bootPipeline, restorePipeline, templatePipeline } from "./lifecycle.ts";
import { TEMPLATE_WARM_UP, templateRequestOf, WARM_UP_TIMEOUT_MS, type SnapshotDeps } from "./snapshot-steps.ts";
import type { TemplateSnapshot } from "../snapshot/index.ts";
import { newLocalVm, type LocalSetupState, type LocalVm, type VmOutcome } from "./local-vm.ts";
import { outcomeAfterTheFact, outcomeOfBootFailure } from "./outcome.ts";
import { DEFAULT_RUNTIME_TIMEOUTS, type RuntimeTimeouts, type VmBootRequest, type SetupStore, type VmImageSource, type VmLaunchPorts, type VmNetworkProvider, type VmRef } from "./ports.ts";
import { runToEnd, type RunToEndOptions } from "./run-to-end.ts";
import { VmDir } from "./vm-dir.ts";

export type RuntimeEvent =
  | { readonly kind: "prepared"; readonly ms: number }
  /** How a VM of a `startFrom: Snapshot` class started, and a template built (or not) for its key. */
  | { readonly kind: "snapshot"; readonly result: "restored" | "fallback" | "created" | "build-failed" | "build-deferred"; readonly ms?: number }
  | { readonly kind: "booted"; readonly ms: number; readonly vmm: VmmKind }
  | { readonly kind: "setup-delivered" }
  | { readonly kind: "ended"; readonly vm: VmRef; readonly outcome: VmOutcome; readonly runMs?: number }
  | { readonly kind: "failed"; readonly code: string }
  /** A VM's cache clone: attached, not attached (the VMM cannot, or it could not be made), or settled after the VM. */
  | { readonly kind: "cache"; readonly result: CacheEventResult };

export type CacheEventResult = "attached" | "unsupported" | "failed" | "promoted" | "discarded";

export interface VmRuntimeOptions {
  readonly stateDir: string;
  readonly images: VmImageSource;
  readonly network?: VmNetworkProvider | undefined;
  readonly launch: VmLaunchPorts;
  /** Records the Exec before it leaves (must not return before it is stored) and deletes the setup at release. */
  readonly setups: Pick<SetupStore, "recordSent" | "delete">;
  /** Pokes the controller to look at this VM again. */
  readonly notify: (vm: VmRef) => void;
  /** Console bytes read when looking for an exit record after the fact (the console cap). */
  readonly maxConsoleBytes: number;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly timeouts?: Partial<RuntimeTimeouts>;
  /** Called for every delivered setup and every boot/prepare measurement (metrics). */
  readonly observe?: (event: RuntimeEvent) => void;
  /** Test fault points agent.* and teardown.before-sealed-removal (docs/failure-proof-points.md); default none. */
  readonly faults?: FaultPoints;
  /** The node's memory snapshots; absent: every VM boots, whatever its class says. */
  readonly snapshots?: SnapshotDeps | undefined;
  /** The node's cache volumes; absent: no VM gets its cache clone. */
  readonly caches?: CacheVolumes | undefined;
  /**
   * Whether the node has room for a template VM of this size beside its job VMs now; a build
   * without room waits for the next VM that misses the snapshot. Default: always.
   */
  readonly templateRoom?: (want: HeldResources) => boolean;
  /** Called when a template VM starts or stops holding room (`templatesHeld` changed). */
  readonly onTemplatesChanged?: () => void;
}

/** What a VM holds of its node, as the scheduler counts it. */
export interface HeldResources {
  readonly vcpu: number;
  readonly memoryMiB: number;
  readonly vmSlots: number;
}

/** Thrown out of a restore's `failed` hook: the restore failed before anything was sent, so the VM boots. */
class RestoreFellBack extends Error {
  readonly step: BootStepName | undefined;
  constructor(step: BootStepName | undefined, cause: unknown) {
    super(describeError(cause), { cause });
    this.step = step;
  }
}

/** The first wait before a failed template build is tried again, and the longest. */
const TEMPLATE_RETRY_MS = 30_000;
const TEMPLATE_RETRY_MAX_MS = 600_000;

/** A restore failing in these steps has sent nothing a boot would not send again: it falls back to a boot. */
const RESTORE_FALLBACK_STEPS: ReadonlySet<BootStepName | undefined> = new Set(["snapshot", "disks", "network", "vmm", "guest", "configure"]);

/** A setup waiting to be handed over: resolved by `deliverSetup`, abandoned by a stop. */
interface SetupGate {
  readonly promise: Promise<string>;
  resolve(setup: string): void;
}

class VmTask {
  local: LocalVm;
  readonly ref: VmRef;
  readonly abort = new AbortController();
  stopRequest: { readonly reason: string; readonly message: string } | undefined;
  run: StepRun | undefined;
  /** The VMM of the boot or adoption, once one runs (stopped on a stop request). */
  vm: RunningVm | undefined;
  done: Promise<void> = Promise.resolve();
  pid: number | undefined;
  setupGate: SetupGate | undefined;
  /** The workload carries a one-time setup (its handoff is tracked in `local.setup`). */
  requiresSetup = false;
  /** What the VM holds of the node (from its boot request, or an adopted VM's record); unknown for one only recorded as ended. */
  held: HeldResources | undefined;

  constructor(ref: VmRef, local: LocalVm) {
    this.ref = ref;
    this.local = local;
  }
}

export class VmRuntime {
  readonly #o: VmRuntimeOptions;
  readonly #t: RuntimeTimeouts;
  readonly #tasks = new Map<string, VmTask>();
  readonly #faults: FaultPoints;
  readonly #deps: BootDeps;
  /** Template VMs being built (their directories and ports are live for the sweep). */
  /** Template VMs being built, by id, with what each holds of the node. */
  readonly #templates = new Map<string, HeldResources>();
  /** Keys whose template build failed: when to try again, and the last wait. */
  readonly #templateBackoff = new Map<string, { readonly delayMs: number; readonly retryAt: number }>();

  constructor(options: VmRuntimeOptions) {
    this.#o = options;
    this.#t = { ...DEFAULT_RUNTIME_TIMEOUTS, ...options.timeouts };
    this.#faults = options.faults ?? NO_FAULTS;
    this.#deps = {
      stateDir: options.stateDir,
      images: options.images,
      ...(options.network === undefined ? {} : { network: options.network }),
      launch: options.launch,
      clock: options.clock,
      timeouts: this.#t,
      faults: this.#faults,
      clientName: "imp-agent",
      ...(options.caches === undefined ? {} : { caches: options.caches }),
      onCacheEvent: (result) => options.observe?.({ kind: "cache", result }),
      onVmStarted: (id, vm) => {
        const task = this.#tasks.get(id);
        if (task === undefined) return;
        task.vm = vm;
        task.pid = vm.pid;
        // A stop that came while the VMM was starting: the step's signal ends the boot, this the VMM.
        if (task.stopRequest !== undefined) void vm.stop(this.#t.stopGraceMs);
      },
      workload: {
        awaitSetup: (id, signal) => this.#awaitSetup(id, signal),
        recordSent: async (id, execId, signal) => {
          const task = this.#tasks.get(id);
          if (task === undefined) throw terminalError("VmMissing", `Cannot record exec ${execId}: no task`);
          await this.#o.setups.recordSent(task.ref, execId, signal);
          // Only after the API holds "Sent": the controller derives status from this record.
          if (task.requiresSetup) this.#progress(task, { setup: "sent" });
        },
      },
    };
  }

  vmDir(uid: string): string {
    return VmDir.of(this.#o.stateDir, uid).root;
  }

  local(uid: string): LocalVm | undefined {
    return this.#tasks.get(uid)?.local;
  }

  /** What a VM this runtime started or adopted holds of the node (capacity accounting). */
  held(uid: string): HeldResources | undefined {
    return this.#tasks.get(uid)?.held;
  }

  /** VMs this runtime holds (for capacity accounting and the sweep). */
  liveUids(): string[] {
    return [...this.#tasks.keys(), ...this.#templates.keys()];
  }

  /** What template VMs being built hold of the node now: not job VMs, so the node's reported capacity leaves it out. */
  templatesHeld(): HeldResources {
    let vcpu = 0;
    let memoryMiB = 0;
    for (const held of this.#templates.values()) {
      vcpu += held.vcpu;
      memoryMiB += held.memoryMiB;
    }
    return { vcpu, memoryMiB, vmSlots: this.#templates.size };
  }

  /** Starts booting the VM. Returns at once; progress arrives through `notify`. */
  start(ref: VmRef, request: VmBootRequest): void {
    if (this.#tasks.has(ref.uid)) return;
    const task = new VmTask(ref, { ...newLocalVm(ref.uid), at: { preparing: this.#o.clock.now() } });
    task.requiresSetup = request.requiresSetup;
    task.held = { vcpu: request.vcpus, memoryMiB: request.memoryMiB, vmSlots: 1 };
    this.#tasks.set(ref.uid, task);
    task.done = this.#boot(task, request);
    this.#o.notify(ref); // so Preparing reaches the API now, not at the next step
  }

  /** Records a VM that failed before it could start (e.g. its plan is invalid): ended, nothing to free. */
  failBeforeStart(ref: VmRef, outcome: VmOutcome): void {
    if (this.#tasks.has(ref.uid)) return;
    this.#tasks.set(ref.uid, new VmTask(ref, { ...newLocalVm(ref.uid), stage: "ended", outcome, at: { ended: this.#o.clock.now() } }));
    this.#o.observe?.({ kind: "failed", code: outcome.reason });
  }

  /**
   * Hands the opened one-time setup to a VM awaiting it. Returns false (and keeps nothing) when the
   * VM is not awaiting one; the caller must not keep the plaintext either way.
   */
  deliverSetup(uid: string, setup: string): boolean {
    const task = this.#tasks.get(uid);
    if (task?.local.stage !== "awaiting-setup" || task.setupGate === undefined) return false;
    task.setupGate.resolve(setup);
    return true;
  }

  /** Stops the VM (graceful, then kill). The outcome is `reason` unless the VM already ended on its own. */
  stop(uid: string, reason: string, message: string): void {
    const task = this.#tasks.get(uid);
    if (task === undefined || task.local.stage === "ended" || task.local.stage === "released" || task.local.stage === "stopping") return;
    task.stopRequest = { reason, message };
    task.local = { ...task.local, stage: "stopping" };
    task.abort.abort(terminalError("VmStopped", `VM stopped: ${message}`));
    void task.vm?.stop(this.#t.stopGraceMs);
  }

  /**
   * Frees everything of the VM on this node: VMM stopped and verified gone, guest channel closed,
   * tap detached, disks and directory removed, sealed setup and inputs removed from the status. Idempotent, also for VMs this
   * runtime never ran (files of an earlier agent run).
   */
  async release(ref: VmRef): Promise<void> {
    let task = this.#tasks.get(ref.uid);
    if (task === undefined) {
      task = new VmTask(ref, { ...newLocalVm(ref.uid), stage: "ended", outcome: { succeeded: false, reason: VM_REASONS.Deleted, message: "released without a local record" } });
      this.#tasks.set(ref.uid, task);
    }
    if (task.local.stage === "released") return;
    if (task.local.stage === "starting" || task.local.stage === "awaiting-setup" || task.local.stage === "running") this.stop(ref.uid, VM_REASONS.Deleted, "released");
    await task.done;
    await task.run?.rollback();
    await task.vm?.stop(this.#t.stopGraceMs);
    const stopped = task.vm?.stopped;
    if (stopped !== undefined) this.#log(task).info({ rung: stopped.rung, exitMs: Math.round(stopped.exitMs), killMs: Math.round(stopped.killMs), cleanupMs: Math.round(stopped.cleanupMs) }, "VM stopped");
    const dir = VmDir.of(this.#o.stateDir, ref.uid);
    // Processes of an earlier agent run that nobody re-adopted: stopped here, never left running.
    const orphans = task.vm === undefined ? await this.#o.launch.adoptProcesses?.(dir) : undefined;
    let orphansGone = true;
    for (const p of orphans ?? []) {
      await p.stop(this.#t.stopGraceMs);
      orphansGone &&= !p.running;
    }
    await this.#o.network?.detach(ref.uid);
    await rm(dir.root, { recursive: true, force: true });
    this.#o.launch.releaseCid(ref.uid);
    const processGone = orphansGone && (task.pid === undefined || processState(task.pid) === "gone");
    await this.#faults.hit("teardown.before-sealed-removal");
    await this.#o.setups.delete(ref);
    task.local = { ...task.local, stage: "released", processGone, resourcesReleased: true, at: { ...task.local.at, released: this.#o.clock.now() } };
    this.#o.notify(ref);
  }

  /**
   * After an agent restart: re-adopts a VM an earlier run of this agent booted, from its VM record
   * and its supervised processes, reconnects to its guest and follows its workload — asking the guest
   * for the state of the one exec id, never sending anything again. A VM whose VMM ended while the
   * agent was down ends with its verified exit record, or `OutcomeUnknown`. Returns false when there
   * is nothing to re-adopt (no record): the caller then fails the VM.
   */
  async adopt(ref: VmRef, setup: LocalSetupState): Promise<boolean> {
    if (this.#tasks.has(ref.uid)) return true;
    const dir = VmDir.of(this.#o.stateDir, ref.uid);
    const facts = await readAdoptionFacts(dir, this.#o.launch.drivers).catch(() => undefined);
    if (facts === undefined) return false;
    const task = new VmTask(ref, { ...newLocalVm(ref.uid), stage: "running", vmm: facts.record.driver, setup, at: {} });
    task.held = { vcpu: facts.record.spec.vcpus, memoryMiB: facts.record.spec.memoryMiB, vmSlots: 1 };
    this.#tasks.set(ref.uid, task);
    task.done = this.#adopt(task, dir, facts);
    return true;
  }

  forget(uid: string): void {
    if (this.#tasks.get(uid)?.local.stage === "released") this.#tasks.delete(uid);
  }

  /** Stops every VM and waits (bounded by the stop grace) — for `imp run` and tests, not agent restarts. */
  async stopAll(): Promise<void> {
    for (const [uid] of this.#tasks) this.stop(uid, VM_REASONS.Deleted, "the agent is stopping every VM");
    await Promise.all([...this.#tasks.values()].map((t) => t.done));
  }

  async #boot(task: VmTask, request: VmBootRequest): Promise<void> {
    const log = this.#log(task);
    const snapshots = this.#o.snapshots;
    if (request.startFrom === "Snapshot" && snapshots !== undefined && this.#o.launch.drivers.get(request.vmm)?.memorySnapshots === true) {
      const started = this.#o.clock.now();
      let restoringFrom: TemplateSnapshot | undefined;
      // Every step of a restore is bounded, but not their sum: a restore that has not reached a
      // configured guest by restoreMs boots instead. Cleared once configure passed (the setup may wait long).
      // Armed as the snapshot step begins: the image before it may take long to pull, as for a boot.
      const deadline = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      const arm = (): void => {
        timer ??= setTimeout(() => deadline.abort(retryableError("Timeout", `Cannot restore VM ${request.name}: no configured guest within ${this.#t.restoreMs} ms`)), this.#t.restoreMs);
      };
      try {
        const pipeline = restorePipeline(this.#deps, snapshots, {
          missing: (req, key, why) => this.#buildTemplate(req, key, why, log),
          found: (snapshot) => (restoringFrom = snapshot),
        });
        const configured = (): void => {
          clearTimeout(timer);
          // A deadline that fired as configure's reply came: counted against configure, which falls back.
          deadline.signal.throwIfAborted();
        };
        this.#end(task, await this.#runLifecycle(task, request, pipeline, log, { deadline: deadline.signal, started: arm, configured }), log);
        return;
      } catch (err) {
        if (!(err instanceof RestoreFellBack)) throw err;
        this.#o.observe?.({ kind: "snapshot", result: "fallback", ms: this.#o.clock.now() - started });
        // A snapshot that did not load, or whose guest did not answer or take its configure, is not
        // tried again: the next VM gets a fresh template. Other failures (a CID, a tap, a launcher,
        // the deadline under load) say nothing about the snapshot.
        const code = err.cause instanceof ImpError ? err.cause.code : undefined;
        // A vsock backend that failed is the backend's fault, never the snapshot's.
        const blamed = !deadline.signal.aborted && code !== "VsockBackendFailed" && ((err.step === "vmm" && code === "SnapshotLoadFailed") || err.step === "guest" || err.step === "configure");
        if (restoringFrom !== undefined && blamed) {
          // Not awaited: the boot must not wait for the store. The key waits before it is built again.
          void snapshots.store.remove(restoringFrom.key, restoringFrom).catch(() => undefined);
          this.#backOff(restoringFrom.key);
        }
        // The restore's VMM is gone (rolled back); a boot that fails before its own must not be taken for it.
        task.vm = undefined;
        task.pid = undefined;
        log.warn({ step: err.step, error: err.message }, err.step === "snapshot" ? "no memory snapshot to restore; booting" : "memory snapshot restore failed; booting");
        this.#progress(task, { at: { preparing: this.#o.clock.now() } });
      } finally {
        clearTimeout(timer);
      }
    }
    this.#end(task, await this.#runLifecycle(task, request, bootPipeline(this.#deps), log, undefined), log);
  }

  /**
   * Builds the template snapshot of `key` in the background; failures are logged and counted, never
   * a VM's. Only with room for it beside the node's job VMs (`templateRoom`); while it runs the node
   * reports that much less capacity (`templatesHeld`), so the scheduler does not fill it. One template
   * VM on the node at a time (under TCG each adds to the load that times the next one out); a key
   * whose build failed waits, doubling from 30 s to 10 min, before it is tried again.
   */
  #buildTemplate(request: VmBootRequest, key: string, why: string, log: Logger): void {
    const snapshots = this.#o.snapshots;
    if (snapshots === undefined || this.#templates.size > 0) return;
    const backoff = this.#templateBackoff.get(key);
    if (backoff !== undefined && this.#o.clock.now() < backoff.retryAt) return;
    const template = templateRequestOf(request, key);
    const held: HeldResources = { vcpu: template.vcpus, memoryMiB: template.memoryMiB, vmSlots: 1 };
    if (this.#o.templateRoom !== undefined && !this.#o.templateRoom(held)) {
      log.info({ key, why }, "no room on the node for a template VM now; the next VM of this class that misses it tries again");
      this.#o.observe?.({ kind: "snapshot", result: "build-deferred" });
      return;
    }
    log.info({ key, why, template: template.id }, "building a memory snapshot template");
    this.#templates.set(template.id, held);
    this.#o.onTemplatesChanged?.();
    const started = this.#o.clock.now();
    void snapshots.store
      .create(key, async (files, signal) => {
        const result = await templatePipeline(this.#deps, files).run({ request: template, log }, { signal, logger: log });
        await result.run.rollback();
        const bootMs = result.run.timings.filter((t) => t.step === "vmm" || t.step === "guest").reduce((ms, t) => ms + t.ms, 0);
        if (result.output.warmUpMs !== undefined) log.info({ key, warmUpMs: result.output.warmUpMs }, `the image's ${TEMPLATE_WARM_UP} ran in the template before its save`);
        return { bootMs, saveMs: result.output.saveMs };
      }, AbortSignal.timeout(this.#t.bootMs + WARM_UP_TIMEOUT_MS + 120_000), { maxBytes: template.memoryMiB * 1024 * 1024 })
      .then(
        () => {
          this.#templateBackoff.delete(key);
          this.#o.observe?.({ kind: "snapshot", result: "created", ms: this.#o.clock.now() - started });
        },
        (err: unknown) => {
          const delayMs = this.#backOff(key);
          log.warn({ key, error: describeError(err), retryInMs: delayMs }, "memory snapshot template failed; VMs of its class keep booting");
          this.#o.observe?.({ kind: "snapshot", result: "build-failed" });
        },
      )
      .finally(() => {
        this.#templates.delete(template.id);
        this.#o.onTemplatesChanged?.();
      });
  }

  /** A key whose template failed to build or whose snapshot failed to restore waits longer each time before it is built again. */
  #backOff(key: string): number {
    const delayMs = Math.min(TEMPLATE_RETRY_MAX_MS, (this.#templateBackoff.get(key)?.delayMs ?? TEMPLATE_RETRY_MS / 2) * 2);
    this.#templateBackoff.set(key, { delayMs, retryAt: this.#o.clock.now() + delayMs });
    return delayMs;
  }

  /**
   * One lifecycle to its end. `restore` (a restore's): a failure before the setup is sent throws
   * {@link RestoreFellBack}, and its `deadline`, armed by `started` as the snapshot step begins, ends
   * the steps until `configured` is called.
   */
  async #runLifecycle(task: VmTask, request: VmBootRequest, pipeline: Parameters<typeof runToEnd<{ request: VmBootRequest; log: Logger }>>[0], log: Logger, restore: { readonly deadline: AbortSignal; readonly started: () => void; readonly configured: () => void } | undefined): Promise<VmOutcome> {
    const restoring = restore !== undefined;
    return runToEnd(pipeline, { request, log }, {
      signal: restore === undefined ? task.abort.signal : AbortSignal.any([task.abort.signal, restore.deadline]),
      log,
      onStep: (name, event) => {
        if (name === "snapshot" && event === "begin") restore?.started();
        if (name === "configure" && event === "end") restore?.configured();
        this.#onBootStep(task, request, name, event, restoring);
      },
      failed: (step, err) => {
        if (task.stopRequest !== undefined) return stopped(task);
        if (restoring && RESTORE_FALLBACK_STEPS.has(step)) throw new RestoreFellBack(step, err);
        return outcomeOfBootFailure(step, err);
      },
      delivered: (_vm, run) => {
        task.run = run;
        const now = this.#o.clock.now();
        this.#progress(task, { stage: "running", setup: request.requiresSetup ? "delivered" : task.local.setup, at: { running: now, ...(request.requiresSetup ? { delivered: now } : {}) } });
        if (request.requiresSetup) this.#o.observe?.({ kind: "setup-delivered" });
        if (restoring) {
          log.info("restored from a memory snapshot");
          this.#o.observe?.({ kind: "snapshot", result: "restored" });
        }
      },
      follow: this.#followOptions(task, log),
    });
  }

  /** Maps the boot's steps onto the VM's local stages (which the decision turns into phases). */
  #onBootStep(task: VmTask, request: VmBootRequest, name: BootStepName, event: "begin" | "end", restoring: boolean): void {
    const now = this.#o.clock.now();
    if (name === "vmm" && event === "begin") {
      this.#progress(task, { step: "booting", vmm: request.vmm, at: { booting: now } });
      if (task.local.at.preparing !== undefined) this.#o.observe?.({ kind: "prepared", ms: now - task.local.at.preparing });
    } else if (name === "guest" && event === "end") {
      this.#progress(task, { at: { guestReady: now } });
      if (task.local.at.booting !== undefined) this.#o.observe?.({ kind: "booted", ms: now - task.local.at.booting, vmm: request.vmm });
    } else if (name === "configure" && event === "end") {
      // The last step a restore can fall back from: from here on the VM is what it came up as.
      this.#progress(task, { startedFrom: restoring ? "Snapshot" : "Boot" });
    } else if (name === "setup" && event === "begin" && request.requiresSetup) {
      task.setupGate = newSetupGate();
      this.#progress(task, { stage: "awaiting-setup", at: { awaitingSetup: now } });
    } else if (name === "exec" && event === "begin") {
      task.setupGate = undefined;
      this.#progress(task, { stage: "starting", step: "delivering" });
    }
  }

  async #adopt(task: VmTask, dir: VmDir, facts: AdoptionFacts): Promise<void> {
    const log = this.#log(task);
    const processes: readonly VmmProcess[] = (await this.#o.launch.adoptProcesses?.(dir)) ?? [];
    const request = { id: task.ref.uid, name: task.ref.name } as VmBootRequest;
    const outcome = await runToEnd(adoptPipeline(this.#deps, facts, processes), { request, log }, {
      signal: task.abort.signal,
      log,
      failed: async (step, err) => {
        for (const p of processes) await p.stop(this.#t.stopGraceMs);
        if (task.stopRequest !== undefined) return stopped(task);
        if (step !== "adopt") return outcomeOfBootFailure(step, err);
        // The VM ended while no agent watched it: only a record that verifies says how.
        const record = facts.exitKey === undefined ? undefined : await firstExitRecord(facts.driver.consoleLog(facts.record.spec), facts.exitKey, workloadExecId(task.ref.uid), this.#o.maxConsoleBytes);
        const vmm = processes.find((p) => p.name === facts.driver.kind);
        const vmmExit = vmm !== undefined && !vmm.running ? await vmm.exited() : undefined;
        const ended = outcomeAfterTheFact(record, vmmExit, describeError(err));
        log.info({ error: describeError(err), exitCode: ended.exitCode, reason: ended.reason }, "VM ended while the agent was away");
        return ended;
      },
      delivered: (vm, run) => {
        task.run = run;
        task.vm = vm.vm;
        task.pid = vm.vm.pid;
        log.info("re-adopted a running VM");
        this.#o.notify(task.ref);
      },
      follow: this.#followOptions(task, log),
    });
    this.#end(task, outcome, log);
  }

  #log(task: VmTask): Logger {
    return this.#o.logger.child({ vm: `${task.ref.namespace}/${task.ref.name}`, uid: task.ref.uid });
  }

  #followOptions(task: VmTask, log: Logger): RunToEndOptions["follow"] {
    return {
      clock: this.#o.clock,
      timeouts: this.#t,
      clientName: "imp-agent",
      maxConsoleBytes: this.#o.maxConsoleBytes,
      stopped: () => (task.stopRequest === undefined ? undefined : stopped(task)),
      // The workload ended, nothing reported or freed yet. Only crash/delay mean something here; a fail is logged and passes.
      afterExit: () => this.#faults.hit("agent.after-exit", task.abort.signal).catch((err: unknown) => log.warn({ error: describeError(err) }, "fault at agent.after-exit")),
    };
  }

  async #awaitSetup(id: string, signal: AbortSignal): Promise<string> {
    const gate = this.#tasks.get(id)?.setupGate;
    if (gate === undefined) throw terminalError("SetupUnavailable", `Cannot wait for the setup of VM ${id}: it is not awaiting one`);
    return new Promise<string>((resolve, reject) => {
      signal.throwIfAborted();
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
      void gate.promise.then(resolve);
    });
  }

  #end(task: VmTask, outcome: VmOutcome, log: Logger): void {
    const now = this.#o.clock.now();
    task.setupGate = undefined;
    // The first outcome stands (a stop that raced the workload's own end does not rewrite it).
    const first = task.local.outcome ?? outcome;
    task.local = { ...task.local, stage: "ended", outcome: first, at: { ...task.local.at, ended: now } };
    log.info({ reason: first.reason, exitCode: first.exitCode, succeeded: first.succeeded }, "VM ended");
    this.#o.observe?.({ kind: "ended", vm: task.ref, outcome: first, ...(task.local.at.running === undefined ? {} : { runMs: now - task.local.at.running }) });
    this.#o.notify(task.ref);
  }

  #progress(task: VmTask, change: Partial<Omit<LocalVm, "at">> & { readonly at?: LocalVm["at"] }): void {
    if (task.local.stage === "stopping" || task.local.stage === "ended" || task.local.stage === "released") {
      // Timestamps and the setup record still count (they happened); the stage does not move back.
      const { stage: _stage, step: _step, ...rest } = change;
      task.local = { ...task.local, ...rest, at: { ...task.local.at, ...change.at } };
    } else {
      task.local = { ...task.local, ...change, at: { ...task.local.at, ...change.at } };
    }
    this.#o.notify(task.ref);
  }
}

function newSetupGate(): SetupGate {
  let resolve: (setup: string) => void = () => undefined;
  const promise = new Promise<string>((r) => (resolve = r));
  return { promise, resolve };
}

function stopped(task: VmTask): VmOutcome {
  return { succeeded: false, reason: task.stopRequest?.reason ?? VM_REASONS.Deleted, message: task.stopRequest?.message ?? "stopped" };
}

