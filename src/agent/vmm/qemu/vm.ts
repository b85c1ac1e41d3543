import type { Socket } from "node:net";
import { open } from "node:fs/promises";
import { basename } from "node:path";
import { describeError, runSteps, terminalError, withDeadline, type Clock, type ImpError, type Logger, type StepRun } from "../../../shared/index.ts";
import { dialHybridVsock } from "../../vsock/index.ts";
import { connectUnix } from "../unix-socket.ts";
import { ConsoleLog } from "../console-log.ts";
import { DirectLauncher } from "../direct-launcher.ts";
import { climbStopLadder, VM_STOP_GRACE_MS, type VmStopReport } from "../stop-ladder.ts";
import type { ConnectGuestOptions, RunningVm, VmmProcess, VmSpec } from "../types.ts";
import { describeExit } from "./child.ts";
import { QemuVmDir } from "./layout.ts";
import { saveMemorySnapshot, type MemorySnapshotTimings } from "./memory-snapshot.ts";
import { QmpClient } from "./qmp.ts";
import { ADOPT_STEPS, BOOT_STEPS, DEFAULT_GUEST_VSOCK_PORT, RESTORE_STEPS, defaultQemuVmConfig, type Boot, type BootConfig, type QemuChannelKind, type QemuExit, type QemuVmOptions } from "./steps.ts";

/** The line a panicking Rust thread of vhost-device-vsock writes first. */
const VSOCK_BACKEND_PANIC = /thread '.*' .*panicked/;

/**
 * One QEMU microvm process (plus its vhost-device-vsock backend for the vsock channel), started
 * through a {@link ProcessLauncher}. `start()` returns once the processes run; the guest's readiness
 * is the caller's business via {@link QemuVm.connectGuest}, which is bounded and fails fast when QEMU
 * exits or the console shows a kernel panic / initramfs failure. QEMU appends the serial console to
 * `dir/serial.log`, which {@link ConsoleLog} follows. Always `stop()` (or `await using`): it is
 * idempotent and leaves no process and no socket behind. This is the {@link RunningVm} that
 * `QemuDriver` returns.
 */
export class QemuVm implements RunningVm {
  readonly kind = "qemu" as const;
  readonly spec: VmSpec;
  readonly dir: QemuVmDir;
  readonly serial: ConsoleLog;
  readonly channel: QemuChannelKind;
  readonly argv: readonly string[];
  readonly pid: number;
  readonly #qemu: VmmProcess;
  readonly #down: AbortController;
  readonly #run: StepRun;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #exited: Promise<QemuExit>;
  #tornDown: Promise<void> | undefined;
  #stopping: Promise<QemuExit> | undefined;
  #stopped: VmStopReport | undefined;
  #snapshotRole: "template" | "restore" | undefined;
  /**
   * vhost-device-vsock's log, followed until the guest answers: a panicked vring worker leaves the
   * backend process running and accepting host connections, but nothing answers them any more
   * (docs/boot-kit.md says how 0.3.0 gets there), so without it a boot would wait out its timeout.
   */
  readonly #backendLog: ConsoleLog | undefined;

  private constructor(spec: VmSpec, boot: Required<Boot>, run: StepRun) {
    this.spec = spec;
    this.dir = boot.dir;
    this.channel = boot.cfg.channel;
    this.argv = boot.argv;
    this.serial = boot.serial;
    this.pid = boot.qemu.pid;
    this.#qemu = boot.qemu;
    this.#down = boot.down;
    this.#run = run;
    this.#logger = boot.cfg.logger;
    this.#clock = boot.cfg.clock;
    this.#exited = this.#qemu.exited().then(async (exit) => {
      // Read the console to its end first: a panic line says why better than QEMU's exit does.
      await this.serial.poll();
      this.#markDown(terminalError("QemuExited", `Cannot reach guest: QEMU exited (${describeExit(exit)})${await qemuLogSuffix(this.dir.qemuLog())}`, { context: { serialLog: this.serial.path } }));
      this.#logger.info({ vm: this.spec.name, dir: this.dir.root, exit: describeExit(exit) }, "qemu exited");
      return exit;
    });
    void this.#exited.then(() => this.#teardown());
    // Until the guest answers, a vsock backend that failed for good ends the boot at once.
    if (this.channel === "vsock") {
      const backendLog = new ConsoleLog(this.dir.backendLog(), {
        fatalPatterns: [VSOCK_BACKEND_PANIC],
        pollMs: 500,
        tailBytes: 16 * 1024,
        onFatal: (line) => this.#markDown(terminalError("VsockBackendFailed", `Cannot reach guest of VM ${spec.name}: its vsock backend (vhost-device-vsock) failed and answers no connection any more: ${line}`, { context: { backendLog: this.dir.backendLog() } })),
      }).start();
      this.#backendLog = backendLog;
      void this.#exited.then(() => backendLog.close());
    }
  }

  /**
   * Starts the VM: a boot, or with `snapshot.role === "restore"` a restore from a template's memory
   * snapshot (the guest resumes where the template was saved). Rejects with a classified error,
   * leaving nothing running and no socket behind.
   */
  static async start(options: QemuVmOptions): Promise<QemuVm> {
    const cfg: BootConfig = { ...defaultQemuVmConfig(), ...stripUndefined(options) } as BootConfig;
    const spec = options.spec ?? specOf(options, cfg.guestCid);
    const boot: Boot = {
      cfg,
      spec,
      dir: new QemuVmDir(options.dir),
      launcher: options.launcher ?? new DirectLauncher({ dieWithParent: cfg.dieWithParent }),
      down: new AbortController(),
    };
    const restoring = cfg.snapshot?.role === "restore";
    const run = await runSteps(restoring ? RESTORE_STEPS : BOOT_STEPS, boot, {
      logger: cfg.logger,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      onFailure: (step, err) => cfg.logger.warn({ vm: spec.name, step, error: describeError(err) }, restoring ? "qemu restore failed" : "qemu boot failed"),
    });
    const vm = new QemuVm(spec, boot as Required<Boot>, run);
    vm.#snapshotRole = cfg.snapshot?.role;
    cfg.logger.info({ vm: spec.name, pid: vm.pid, dir: boot.dir.root, channel: cfg.channel, restored: restoring, steps: run.timings }, "qemu started");
    return vm;
  }

  /**
   * Takes over a VM an earlier agent run started (with a supervising launcher), from its processes
   * (`adoptAllSupervised`) and the options it was started with (`readVmRecord`): QEMU and, over
   * vsock, its backend must still run and the channel's socket must exist. The console is followed
   * again from the start of this boot's log. Rejects with a terminal `VmAdoptFailed` otherwise,
   * after stopping whatever of the VM was left.
   */
  static async adopt(options: QemuVmOptions & { readonly processes: readonly VmmProcess[] }): Promise<QemuVm> {
    const { processes, ...rest } = options;
    const cfg: BootConfig = { ...defaultQemuVmConfig(), ...stripUndefined(rest) } as BootConfig;
    const spec = options.spec ?? specOf(options, cfg.guestCid);
    const boot: Boot = {
      cfg,
      spec,
      dir: new QemuVmDir(options.dir),
      // Adoption starts nothing; the launcher is never used.
      launcher: { launch: () => Promise.reject(terminalError("VmAdoptFailed", "Cannot launch while adopting a VM")) },
      down: new AbortController(),
      adopting: processes,
    };
    const run = await runSteps(ADOPT_STEPS, boot, {
      logger: cfg.logger,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      onFailure: (step, err) => cfg.logger.warn({ vm: spec.name, step, error: describeError(err) }, "qemu adoption failed"),
    });
    const vm = new QemuVm(spec, boot as Required<Boot>, run);
    cfg.logger.info({ vm: spec.name, pid: vm.pid, dir: boot.dir.root, channel: cfg.channel }, "qemu adopted");
    return vm;
  }

  #teardown(): Promise<void> {
    this.#tornDown ??= this.#run.rollback();
    return this.#tornDown;
  }

  #markDown(reason: ImpError): void {
    if (!this.#down.signal.aborted) this.#down.abort(reason);
  }

  get guestChannel(): "vsock" | "serial" {
    return this.channel === "vsock" ? "vsock" : "serial";
  }

  get running(): boolean {
    return this.#qemu.running;
  }

  /** The guest agent answered: from now on the console is the workload's, and no line of it is fatal. */
  guestReady(): void {
    this.serial.disarm();
    this.#backendLog?.disarm();
    void this.#backendLog?.close();
  }

  /** Aborts once the VM can no longer come up (QEMU exited, kernel panic, initramfs failure); its reason says why. */
  get downSignal(): AbortSignal {
    return this.#down.signal;
  }

  /** Resolves when QEMU has exited and its console has been read to the end (`serial.tail()` is complete). */
  exited(): Promise<QemuExit> {
    return this.#exited;
  }

  /**
   * A byte stream to the guest agent: over vsock, a hybrid-vsock dial of `port` that retries until
   * the guest listens; over virtio-serial, a connection to QEMU's port socket (the guest may not have
   * opened its end yet — callers repeat their first request until answered). Bounded by `timeoutMs`;
   * fails at once with the VM's down reason when it stops or panics.
   */
  async connectGuest(options: ConnectGuestOptions): Promise<Socket> {
    const signal = options.signal === undefined ? this.#down.signal : AbortSignal.any([this.#down.signal, options.signal]);
    signal.throwIfAborted();
    switch (this.channel) {
      case "vsock":
        return dialHybridVsock({
          udsPath: this.dir.vsockUds(),
          port: options.port ?? DEFAULT_GUEST_VSOCK_PORT,
          totalTimeoutMs: options.timeoutMs,
          signal,
          ...(options.onAttemptFailed === undefined ? {} : { onAttemptFailed: options.onAttemptFailed }),
        });
      case "serial":
        return withDeadline(`connect to ${this.dir.agentSocket()}`, options.timeoutMs, async (deadline) => {
          for (;;) {
            try {
              return await connectUnix(this.dir.agentSocket(), "SerialConnectFailed");
            } catch (err) {
              if (deadline.aborted) {
                signal.throwIfAborted();
                throw err;
              }
              await sleepOrAbort(50, deadline);
            }
          }
        }, signal);
      case "none":
        throw terminalError("GuestChannelMissing", "Cannot connect to guest: the VM was started without a guest channel");
    }
  }

  /**
   * The stop ladder with SIGTERM as its graceful rung (QEMU treats it as the power button and exits),
   * SIGKILL once `graceMs` has passed; then its vsock backend stops, the sockets go and the console is
   * read to its end. Idempotent; returns how QEMU ended (which may be its own earlier exit).
   */
  stop(graceMs = VM_STOP_GRACE_MS): Promise<QemuExit> {
    this.#stopping ??= (async () => {
      const { report } = await climbStopLadder({
        process: this.#qemu,
        graceful: async () => this.#qemu.signal("SIGTERM"),
        graceMs,
        // Past the grace, at once: QEMU had its SIGTERM.
        killGraceMs: 0,
        // The console is read to its end (a panic line says more than QEMU's exit) before the teardown closes it.
        cleanup: async () => {
          await this.#exited;
          await this.#teardown();
        },
      });
      this.#stopped = report;
      return this.#exited;
    })();
    return this.#stopping;
  }

  /**
   * Saves this template VM — paused, its RAM already in its memory file — as a memory snapshot whose
   * device state goes to `statePath`, then ends QEMU (a template that ran on would write through to
   * the file restored VMs map). Only for a VM started with `snapshot.role === "template"`; the caller
   * must make sure no job ever ran in it and no secret was ever sent to it. Rejects with a classified
   * error; QEMU is stopped either way.
   */
  async saveSnapshot(statePath: string, options: { readonly timeoutMs: number }): Promise<MemorySnapshotTimings> {
    if (this.#snapshotRole !== "template") throw terminalError("VmSpecInvalid", `Cannot save VM ${this.spec.name} as a snapshot: it was not started as a template`);
    this.#down.signal.throwIfAborted();
    try {
      const qmp = await QmpClient.connect(this.dir.qmpSocket(), { timeoutMs: options.timeoutMs, signal: this.#down.signal });
      try {
        const timings = await saveMemorySnapshot(qmp, statePath, { timeoutMs: options.timeoutMs, clock: this.#clock, signal: this.#down.signal });
        // QEMU answers quit and then exits 0; the exit may close the socket before the reply.
        await qmp.execute("quit", {}, { timeoutMs: 5_000 }).catch(() => undefined);
        return timings;
      } finally {
        qmp.close();
      }
    } finally {
      await this.stop();
    }
  }

  get stopped(): VmStopReport | undefined {
    return this.#stopped;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** "; qemu: <last lines of its stderr>", or "" — QEMU's own words for why it exited. */
async function qemuLogSuffix(path: string): Promise<string> {
  let text = "";
  try {
    const file = await open(path, "r");
    try {
      const { size } = await file.stat();
      const length = Math.min(size, 4096);
      const { buffer, bytesRead } = await file.read(Buffer.alloc(length), 0, length, size - length);
      text = buffer.subarray(0, bytesRead).toString("utf8").trim();
    } finally {
      await file.close();
    }
  } catch {
    return "";
  }
  return text === "" ? "" : `; qemu: ${text.split("\n").slice(-3).join(" | ")}`;
}

/** The driver-neutral spec of a VM started from {@link QemuVmOptions} directly: the first drive is root. */
function specOf(options: QemuVmOptions, guestCid: number): VmSpec {
  const m = options.machine;
  return {
    name: basename(options.dir),
    dir: options.dir,
    vcpus: m.vcpus,
    memoryMiB: m.memoryMiB,
    kernel: m.kernel,
    ...(m.initrd === undefined ? {} : { initrd: m.initrd }),
    cmdline: m.cmdline.join(" "),
    drives: m.drives.map((d, i) => ({ id: d.id, path: d.path, readOnly: d.readOnly === true, isRoot: i === 0, ...(d.format === undefined ? {} : { format: d.format }), ...(d.backing === undefined ? {} : { backing: d.backing }) })),
    ...(m.tap === undefined ? {} : { network: m.tap }),
    guestCid,
  };
}


function sleepOrAbort(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
