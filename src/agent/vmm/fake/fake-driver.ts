/**
 * A {@link VmmDriver} without a VMM, for CPU-only tests of the VM lifecycle: each "VM" is a
 * {@link FakeGuest} serving the real guest protocol on a Unix socket in the VM's directory, with a
 * scripted boot (delay, a hung agent, a kernel panic), scripted workloads, a lost channel and a VMM
 * that dies. It follows its console with the real {@link ConsoleLog} and writes the real VM record, so
 * the lifecycle around it — fatal lines, re-adoption, exit records — runs as it does over QEMU.
 */
import { climbStopLadder, VM_STOP_GRACE_MS, type VmStopReport } from "../stop-ladder.ts";
import { mkdir, writeFile } from "node:fs/promises";
import type { Socket } from "node:net";
import { join } from "node:path";
import { describeExit, retryableError, terminalError, type Clock } from "../../../shared/index.ts";
import { connectUnix } from "../unix-socket.ts";
import { ConsoleLog } from "../console-log.ts";
import type { ConnectGuestOptions, DriverContext, KernelCmdlineParts, RunningVm, VmExit, VmmDriver, VmmKind, VmmProcess, VmSpec } from "../types.ts";
import { removeVmRecord, writeVmRecord } from "../vm-record.ts";
import { FakeGuest, type FakeWorkload } from "./fake-guest.ts";

/** How one fake VM behaves. */
export interface FakeVmScript {
  /** Clock time from start until the guest agent listens. Default 0. */
  readonly bootMs?: number;
  /** The guest agent accepts streams and never answers. */
  readonly hang?: boolean;
  /** During boot the console shows this line and the guest never comes up. */
  readonly panic?: string;
  /** The workload of each exec (from its environment). Default: exit 0 after 10 ms. */
  readonly workload?: (env: Readonly<Record<string, string>>) => FakeWorkload;
}

// Pids no process has (above the kernel's pid_max of 4194304): "is the VMM gone?" checks say yes.
let nextPid = 5_000_000;

/** A fake VMM process: running until the VM ends. */
class FakeProcess implements VmmProcess {
  readonly name: string;
  readonly pid = nextPid++;
  #exit: VmExit | undefined;
  readonly #exited: Promise<VmExit>;
  #resolve: (exit: VmExit) => void = () => undefined;

  constructor(name: string) {
    this.name = name;
    this.#exited = new Promise((r) => (this.#resolve = r));
  }
  get running(): boolean {
    return this.#exit === undefined;
  }
  exited(): Promise<VmExit> {
    return this.#exited;
  }
  end(exit: VmExit): void {
    if (this.#exit !== undefined) return;
    this.#exit = exit;
    this.#resolve(exit);
  }
  signal(signal: NodeJS.Signals): void {
    this.end({ code: null, signal });
  }
  async stop(): Promise<VmExit> {
    this.signal("SIGTERM");
    return this.#exited;
  }
}

export class FakeVm implements RunningVm {
  readonly kind: VmmKind;
  readonly guestChannel = "vsock" as const;
  readonly spec: VmSpec;
  readonly guest: FakeGuest;
  readonly process: FakeProcess;
  readonly console: ConsoleLog;
  readonly #down = new AbortController();
  readonly #socket: string;

  constructor(kind: VmmKind, spec: VmSpec, script: FakeVmScript, clock: Clock) {
    this.kind = kind;
    this.spec = spec;
    this.process = new FakeProcess(kind);
    this.#socket = join(spec.dir, "guest.sock");
    const consolePath = join(spec.dir, "console.log");
    this.console = new ConsoleLog(consolePath, {
      pollMs: 5,
      onFatal: (line) => this.#markDown(terminalError("GuestBootFailed", `Cannot boot guest: console says ${JSON.stringify(line)}`)),
    }).start();
    this.guest = new FakeGuest({
      consolePath,
      clock,
      workload: script.workload ?? (() => ({ exitCode: 0, runMs: 10 })),
      // The guest's power-off (or, on a VMM that exits on reboot, its reboot) ends the VMM with 0.
      onShutdown: () => this.end({ code: 0, signal: null }),
    });
    void this.process.exited().then((exit) => {
      this.#markDown(terminalError("FakeVmmExited", `Cannot reach guest: the VMM exited (${describeExit(exit)})`));
      this.guest.close();
      void this.console.close();
    });
  }

  async boot(script: FakeVmScript, clock: Clock): Promise<void> {
    this.guest.console("[    0.000000] Linux version 6.1 (fake)");
    if ((script.bootMs ?? 0) > 0) await clock.sleep(script.bootMs ?? 0);
    if (!this.process.running) return;
    if (script.panic !== undefined) {
      this.guest.console(script.panic);
      return;
    }
    if (script.hang === true) this.guest.mute();
    await this.guest.listen(this.#socket);
  }

  get pid(): number {
    return this.process.pid;
  }
  get downSignal(): AbortSignal {
    return this.#down.signal;
  }
  exited(): Promise<VmExit> {
    return this.process.exited();
  }
  guestReady(): void {
    this.console.disarm();
  }
  /** The VMM ends (a crash when `exit` carries a signal). */
  end(exit: VmExit): void {
    this.process.end(exit);
  }

  async connectGuest(options: ConnectGuestOptions): Promise<Socket> {
    const deadline = performance.now() + options.timeoutMs;
    const signal = options.signal === undefined ? this.#down.signal : AbortSignal.any([this.#down.signal, options.signal]);
    for (;;) {
      signal.throwIfAborted();
      try {
        return await connectUnix(this.#socket, "GuestConnectTimeout", "the fake guest");
      } catch (err) {
        if (performance.now() > deadline) throw retryableError("GuestConnectTimeout", `Cannot connect to the fake guest within ${options.timeoutMs} ms`, { cause: err });
        await new Promise((r) => setTimeout(r, 5));
      }
    }
  }

  /** The same ladder as the real drivers; a fake VMM always honours the graceful rung. */
  async stop(graceMs = VM_STOP_GRACE_MS): Promise<VmExit> {
    const { exit, report } = await climbStopLadder({
      process: this.process,
      graceful: async () => this.end({ code: null, signal: "SIGTERM" }),
      graceMs,
      killGraceMs: 0,
      cleanup: () => removeVmRecord(this.spec.dir),
    });
    this.stopped ??= report;
    return exit;
  }

  stopped: VmStopReport | undefined;

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  #markDown(reason: Error): void {
    if (!this.#down.signal.aborted) this.#down.abort(reason);
  }
}

export class FakeVmmDriver implements VmmDriver {
  readonly kind: VmmKind;
  readonly shutdownMode = "poweroff" as const;
  readonly guestChannel = "vsock" as const;
  readonly memorySnapshots = false;
  /** A fake VMM holds no guest memory: nothing is limited by it. */
  readonly memoryOverheadMiB = 0;
  /** Every VM started, by its directory (adoption finds them here, as a real driver finds its processes). */
  readonly vms = new Map<string, FakeVm>();
  readonly #script: (spec: VmSpec) => FakeVmScript;
  readonly #clock: Clock;

  constructor(options: { readonly clock: Clock; readonly script?: (spec: VmSpec) => FakeVmScript; readonly kind?: VmmKind }) {
    this.#clock = options.clock;
    this.#script = options.script ?? (() => ({}));
    this.kind = options.kind ?? "qemu";
  }

  cmdline(parts: KernelCmdlineParts): string {
    return [...parts.kernel, ...parts.imp, ...parts.extra].join(" ");
  }

  consoleLog(spec: VmSpec): string {
    return join(spec.dir, "console.log");
  }

  async start(spec: VmSpec, _context: DriverContext, signal?: AbortSignal): Promise<FakeVm> {
    signal?.throwIfAborted();
    await mkdir(spec.dir, { recursive: true });
    await writeFile(this.consoleLog(spec), "");
    await writeVmRecord(spec.dir, { driver: this.kind, channel: "vsock", spec });
    const script = this.#script(spec);
    const vm = new FakeVm(this.kind, spec, script, this.#clock);
    this.vms.set(spec.dir, vm);
    void vm.boot(script, this.#clock);
    return vm;
  }

  async adopt(spec: VmSpec, processes: readonly VmmProcess[]): Promise<FakeVm> {
    const vm = this.vms.get(spec.dir);
    if (vm === undefined || !vm.process.running || !processes.includes(vm.process)) {
      throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${spec.dir}: its VMM is not running`);
    }
    // Adopted long after its boot: its console holds whatever its workload wrote since.
    vm.guestReady();
    return vm;
  }
}
