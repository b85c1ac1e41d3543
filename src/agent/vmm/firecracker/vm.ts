import type { Socket } from "node:net";
import { stat } from "node:fs/promises";
import { describeError, describeExit, ImpError, retryableError, terminalError, type Logger, type StepRun, type StepTiming } from "../../../shared/index.ts";
import { dialHybridVsock } from "../../vsock/index.ts";
import type { ConnectGuestOptions, RunningVm, VmExit, VmmProcess, VmSpec } from "../types.ts";
import { actionRequest, PAUSE_VM, snapshotCreateRequest } from "./api-requests.ts";
import type { FirecrackerApi } from "./api-client.ts";
import type { FirecrackerLayout } from "./layout.ts";
import { ConsoleLog, DEFAULT_MAX_CONSOLE_BYTES } from "../console-log.ts";
import { climbStopLadder, VM_STOP_GRACE_MS, type VmStopReport } from "../stop-ladder.ts";

/** The guest agent's vsock port (docs/guest-protocol.md). */
export const DEFAULT_GUEST_VSOCK_PORT = 10700;

/**
 * A started Firecracker VM. It owns the boot's cleanups (`StepRun.rollback`): they run once, when
 * `stop()` ends the VM or when Firecracker exits by itself, so sockets and the jail never outlive
 * the process.
 */
export class FirecrackerVm implements RunningVm {
  readonly kind = "firecracker" as const;
  readonly guestChannel = "vsock" as const;
  readonly spec: VmSpec;
  readonly layout: FirecrackerLayout;
  readonly api: FirecrackerApi;
  /** How long each boot step took. */
  readonly bootTimings: readonly StepTiming[];
  readonly #process: VmmProcess;
  readonly #boot: StepRun;
  readonly #down = new AbortController();
  readonly #logger: Logger;
  readonly #killGraceMs: number;
  readonly #cleanedUp: Promise<void>;
  readonly #console: ConsoleLog;
  #stopping: Promise<VmExit> | undefined;
  #stopped: VmStopReport | undefined;

  constructor(init: {
    readonly spec: VmSpec;
    readonly layout: FirecrackerLayout;
    readonly api: FirecrackerApi;
    readonly process: VmmProcess;
    readonly boot: StepRun;
    readonly logger: Logger;
    readonly killGraceMs: number;
    /** Console bytes the guest may write before the VM is marked down with `GuestConsoleFlood` (default 16 MiB). */
    readonly maxConsoleBytes?: number;
  }) {
    this.spec = init.spec;
    this.layout = init.layout;
    this.api = init.api;
    this.#process = init.process;
    this.#boot = init.boot;
    this.bootTimings = init.boot.timings;
    this.#logger = init.logger;
    this.#killGraceMs = init.killGraceMs;
    // Firecracker writes the guest's serial console to its stdout, the file console.log on the node's
    // disk, without a size limit: a guest flooding it is marked down (the owner then stops it).
    const maxConsoleBytes = init.maxConsoleBytes ?? DEFAULT_MAX_CONSOLE_BYTES;
    const consoleLog = this.layout.host.consoleLog;
    const consoleFollower = new ConsoleLog(consoleLog, {
      maxBytes: maxConsoleBytes,
      onOverflow: (bytes) => {
        if (!this.#down.signal.aborted) {
          this.#down.abort(terminalError("GuestConsoleFlood", `Cannot keep VM ${this.spec.name} running: its guest wrote ${bytes} bytes to the serial console, over the ${maxConsoleBytes}-byte limit (a guest flooding its console would fill the node's disk); the last lines are in ${consoleLog}`, { context: { vm: this.spec.name, consoleLog, bytes } }));
        }
      },
    }).start();
    this.#console = consoleFollower;
    this.#cleanedUp = this.#process.exited().then(async (exit) => {
      await consoleFollower.close();
      if (!this.#down.signal.aborted) {
        this.#down.abort(terminalError("FirecrackerExited", `Cannot reach guest of VM ${this.spec.name}: Firecracker exited (${describeExit(exit)})`, { context: { vm: this.spec.name, consoleLog: this.layout.host.consoleLog } }));
      }
      await this.#boot.rollback();
      this.#logger.info({ vm: this.spec.name, exit: describeExit(exit) }, "firecracker exited");
    });
  }

  get pid(): number {
    return this.#process.pid;
  }

  get running(): boolean {
    return this.#process.running;
  }

  /** The guest agent answered: the console is the workload's from now on. */
  guestReady(): void {
    this.#console.disarm();
  }

  get downSignal(): AbortSignal {
    return this.#down.signal;
  }

  get stopped(): VmStopReport | undefined {
    return this.#stopped;
  }

  exited(): Promise<VmExit> {
    return this.#process.exited();
  }

  /** Hybrid vsock through Firecracker's `uds_path`; fails at once with the down reason when the VM goes. */
  async connectGuest(options: ConnectGuestOptions): Promise<Socket> {
    const signal = options.signal === undefined ? this.#down.signal : AbortSignal.any([this.#down.signal, options.signal]);
    signal.throwIfAborted();
    return dialHybridVsock({
      udsPath: this.layout.host.vsockUds,
      port: options.port ?? DEFAULT_GUEST_VSOCK_PORT,
      totalTimeoutMs: options.timeoutMs,
      signal,
      ...(options.onAttemptFailed === undefined ? {} : { onAttemptFailed: options.onAttemptFailed }),
    });
  }

  /**
   * A template VM only (started with `memorySnapshot.role === "template"`): pauses it, writes a full
   * snapshot — device state to `statePath`, all guest memory to the spec's `memoryFile` — and ends
   * Firecracker (a paused guest answers no Ctrl+Alt+Del, so the ladder goes to its kill at once).
   * The caller must make sure no job ever ran in it and no secret was ever sent to it. Rejects with a
   * classified error; Firecracker is stopped either way.
   */
  async saveSnapshot(statePath: string, options: { readonly timeoutMs: number }): Promise<{ readonly ms: number; readonly stateBytes: number }> {
    const snapshot = this.spec.memorySnapshot;
    if (snapshot?.role !== "template") throw terminalError("VmSpecInvalid", `Cannot save VM ${this.spec.name} as a snapshot: it was not started as a template`);
    this.#down.signal.throwIfAborted();
    const started = performance.now();
    try {
      const signal = AbortSignal.any([this.#down.signal, AbortSignal.timeout(options.timeoutMs)]);
      await this.api.put(PAUSE_VM, { signal });
      await this.api.put(snapshotCreateRequest(statePath, snapshot.memoryFile), { timeoutMs: options.timeoutMs, signal });
      const ms = performance.now() - started;
      return { ms, stateBytes: (await stat(statePath)).size };
    } catch (err) {
      if (err instanceof ImpError) throw err;
      throw retryableError("SnapshotSaveFailed", `Cannot save VM ${this.spec.name} as a snapshot: ${describeError(err)}`, { cause: err, context: { vm: this.spec.name, statePath } });
    } finally {
      await this.stop(0);
    }
  }

  /**
   * The stop ladder with Ctrl+Alt+Del as its graceful rung (a Linux guest with `reboot=k` reboots,
   * and Firecracker exits on a guest reboot); then the sockets and the jail go. Idempotent.
   */
  stop(graceMs = VM_STOP_GRACE_MS): Promise<VmExit> {
    this.#stopping ??= (async () => {
      const { exit, report } = await climbStopLadder({
        process: this.#process,
        graceful: (deadline) => this.api.put(actionRequest("SendCtrlAltDel"), { timeoutMs: Math.min(graceMs, 2_000), signal: deadline }).then(() => undefined),
        graceMs,
        killGraceMs: this.#killGraceMs,
        cleanup: () => this.#cleanedUp,
        // Not fatal: the kill rung ends the VM anyway.
        onGracefulFailed: (err) => this.#logger.debug({ vm: this.spec.name, error: describeError(err) }, "SendCtrlAltDel failed"),
      });
      this.#stopped = report;
      return exit;
    })();
    return this.#stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
