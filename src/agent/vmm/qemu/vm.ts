import { createConnection, type Socket } from "node:net";
import { mkdir, open, rm, stat, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import {
  describeError,
  retryableError,
  runSteps,
  silentLogger,
  systemClock,
  terminalError,
  withDeadline,
  type Clock,
  type ImpError,
  type Logger,
  type Step,
  type StepRun,
} from "../../../shared/index.ts";
import { dialHybridVsock } from "../../vsock/index.ts";
import { DirectLauncher } from "../direct-launcher.ts";
import type { ConnectGuestOptions, ProcessLauncher, RunningVm, VmExit, VmSpec, VmmProcess } from "../types.ts";
import { buildQemuArgv, type QemuGuestChannel, type QemuMachineSpec } from "./argv.ts";
import { assertExecutable, describeExit } from "./child.ts";
import { ConsoleLog, DEFAULT_MAX_CONSOLE_BYTES } from "../console-log.ts";
import { removeVmRecord, writeVmRecord } from "../vm-record.ts";

/** The guest agent's vsock port and virtio-serial port name (docs/guest-protocol.md). */
export const DEFAULT_GUEST_VSOCK_PORT = 10700;
export const DEFAULT_SERIAL_PORT_NAME = "imp.agent";

export type QemuChannelKind = "vsock" | "serial" | "none";

export interface QemuVmOptions {
  /** This VM's own directory: sockets, serial log, backend log. Created if missing. Keep it short (Unix socket paths ≤ 107 bytes). */
  readonly dir: string;
  readonly machine: Omit<QemuMachineSpec, "channel" | "consoleLog">;
  readonly channel: QemuChannelKind;
  readonly qemuBinary?: string;
  /** rust-vmm vhost-device-vsock binary; required for channel "vsock". */
  readonly vhostDeviceVsock?: string;
  /** Guest CID for vsock (≥ 3). */
  readonly guestCid?: number;
  readonly serialPortName?: string;
  /** With the default launcher: kill QEMU and its backend when this process dies (tests). A node agent leaves this off. */
  readonly dieWithParent?: boolean;
  /** How long the vsock backend may take to create its control socket. */
  readonly backendReadyTimeoutMs?: number;
  readonly logger?: Logger;
  /** Starts QEMU and its backend; default a {@link DirectLauncher} honouring `dieWithParent`. */
  readonly launcher?: ProcessLauncher;
  readonly clock?: Clock;
  /** Aborts the boot; whatever was started by then is stopped. */
  readonly signal?: AbortSignal;
  /** The driver-neutral description this VM answers as `spec`; derived from the options when absent. */
  readonly spec?: VmSpec;
  /**
   * Console bytes the guest may write to `serial.log` before the VM is marked down with
   * `GuestConsoleFlood` (the file is on the node's disk and QEMU does not bound it). Default 16 MiB.
   */
  readonly maxConsoleBytes?: number;
}

export type QemuExit = VmExit;

export function defaultQemuVmConfig(): Required<Pick<QemuVmOptions, "qemuBinary" | "guestCid" | "serialPortName" | "dieWithParent" | "backendReadyTimeoutMs" | "logger" | "clock" | "maxConsoleBytes">> {
  return {
    maxConsoleBytes: DEFAULT_MAX_CONSOLE_BYTES,
    qemuBinary: "qemu-system-x86_64",
    guestCid: 3,
    serialPortName: DEFAULT_SERIAL_PORT_NAME,
    dieWithParent: false,
    backendReadyTimeoutMs: 5_000,
    logger: silentLogger,
    clock: systemClock,
  };
}

/** Where a QEMU VM keeps its files. The only place that builds these paths. */
export class QemuVmDir {
  readonly root: string;
  constructor(root: string) {
    // sun_path is 108 bytes including the NUL; the longest name below is 15 bytes.
    if (Buffer.byteLength(join(root, "vhost-user.sock")) > 107) {
      throw terminalError("VmDirTooLong", `Cannot use VM directory ${root}: Unix socket paths inside it would exceed 107 bytes`);
    }
    this.root = root;
  }
  serialLog(): string { return join(this.root, "serial.log"); }
  /** QEMU's stdout and stderr. */
  qemuLog(): string { return join(this.root, "qemu.log"); }
  backendLog(): string { return join(this.root, "vhost-device-vsock.log"); }
  /** vhost-user control socket between QEMU and vhost-device-vsock. */
  vhostUserSocket(): string { return join(this.root, "vhost-user.sock"); }
  /** Hybrid-vsock Unix socket the host dials (`CONNECT <port>`), as Firecracker's `uds_path`. */
  vsockUds(): string { return join(this.root, "vsock.sock"); }
  /** virtio-serial agent port, QEMU listening. */
  agentSocket(): string { return join(this.root, "agent.sock"); }
  sockets(): string[] { return [this.vhostUserSocket(), this.vsockUds(), this.agentSocket()]; }
}

type BootConfig = ReturnType<typeof defaultQemuVmConfig> & QemuVmOptions;

/** What the boot steps acquire, in order. */
interface Boot {
  readonly cfg: BootConfig;
  readonly spec: VmSpec;
  readonly dir: QemuVmDir;
  readonly launcher: ProcessLauncher;
  readonly down: AbortController;
  backend?: VmmProcess;
  argv?: string[];
  qemu?: VmmProcess;
  serial?: ConsoleLog;
  /** Set when adopting: the processes an earlier agent run started. */
  readonly adopting?: readonly VmmProcess[];
}

function guestChannelOf(cfg: BootConfig, dir: QemuVmDir): { channel?: QemuGuestChannel } {
  if (cfg.channel === "vsock") return { channel: { kind: "vsock", vhostUserSocket: dir.vhostUserSocket() } };
  if (cfg.channel === "serial") return { channel: { kind: "serial", socketPath: dir.agentSocket(), portName: cfg.serialPortName } };
  return {};
}

const FOLLOW_CONSOLE: Step<Boot> = {
  name: "follow console",
  run: (boot, step) => {
    const { dir, down, cfg } = boot;
    const serial = new ConsoleLog(dir.serialLog(), {
      maxBytes: cfg.maxConsoleBytes,
      // An adopted VM booted long ago: its console holds whatever its workload wrote since.
      armed: boot.adopting === undefined,
      // Marking the VM down ends its run like a VMM exit would; the owner's stop() then kills QEMU.
      onOverflow: (bytes) => {
        if (!down.signal.aborted) {
          down.abort(terminalError("GuestConsoleFlood", `Cannot keep VM running: its guest wrote ${bytes} bytes to the serial console, over the ${cfg.maxConsoleBytes}-byte limit (a guest flooding its console would fill the node's disk); the last lines are in ${dir.serialLog()}`, { context: { serialLog: dir.serialLog(), bytes } }));
        }
      },
      onFatal: (line) => {
        if (!down.signal.aborted) {
          down.abort(terminalError("GuestBootFailed", `Cannot boot guest: console says ${JSON.stringify(line)}`, { context: { serialLog: dir.serialLog() } }));
        }
      },
    }).start();
    boot.serial = serial;
    step.onCleanup("close console", () => serial.close());
  },
};

const BOOT_STEPS: readonly Step<Boot>[] = [
  {
    name: "check binaries",
    run: async ({ cfg }) => {
      await assertExecutable("qemu", cfg.qemuBinary);
      if (cfg.channel !== "vsock") return;
      if (cfg.vhostDeviceVsock === undefined) {
        throw terminalError("VsockBackendMissing", "Cannot start a VM with vsock under QEMU: no vhost-device-vsock binary given");
      }
      await assertExecutable("vhost-device-vsock", cfg.vhostDeviceVsock);
    },
  },
  {
    name: "prepare directory",
    run: async ({ cfg, spec, dir }, step) => {
      await mkdir(dir.root, { recursive: true });
      // Stale sockets of an earlier boot would make the backend's bind fail or a dial reach nothing.
      await removeSockets(dir);
      step.onCleanup("remove sockets", () => removeSockets(dir));
      // The console follower reads from the start: this boot's console only.
      await writeFile(dir.serialLog(), "");
      // What a restarted agent needs to adopt this VM; gone with the VM (a stale one would mislead).
      if (cfg.channel === "none") return;
      step.onCleanup("remove vm record", () => removeVmRecord(dir.root));
      await writeVmRecord(dir.root, { driver: "qemu", channel: cfg.channel, spec });
    },
  },
  {
    name: "start vsock backend",
    run: async (boot, step) => {
      const { cfg, dir } = boot;
      if (cfg.channel !== "vsock" || cfg.vhostDeviceVsock === undefined) return;
      const cid = cfg.guestCid;
      if (!Number.isInteger(cid) || cid < 3 || cid > 0xffff_fffe) throw terminalError("VmSpecInvalid", `Cannot use guest CID ${cid}: need an integer in 3..4294967294`);
      const backend = await boot.launcher.launch({
        name: "vhost-device-vsock",
        binary: cfg.vhostDeviceVsock,
        args: ["--vm", `guest-cid=${cid},socket=${dir.vhostUserSocket()},uds-path=${dir.vsockUds()}`],
        stdoutPath: dir.backendLog(),
        stderrPath: dir.backendLog(),
      });
      boot.backend = backend;
      step.onCleanup("stop vsock backend", async () => { await backend.stop(1_000); });
      await waitForControlSocket(backend, dir, cfg, step.signal);
    },
  },
  {
    name: "start qemu",
    run: async (boot, step) => {
      const { cfg, dir } = boot;
      const argv = buildQemuArgv({ ...cfg.machine, consoleLog: dir.serialLog(), ...guestChannelOf(cfg, dir) });
      boot.argv = argv;
      const qemu = await boot.launcher.launch({ name: "qemu", binary: cfg.qemuBinary, args: argv, stdoutPath: dir.qemuLog(), stderrPath: dir.qemuLog() });
      boot.qemu = qemu;
      step.onCleanup("stop qemu", async () => { await qemu.stop(1_000); });
    },
  },
  FOLLOW_CONSOLE,
];

/**
 * Adoption of a VM another agent run started: the same resources as a boot, taken over instead of
 * created, with the same cleanups registered in the same order (so stop and rollback behave alike).
 * A failed adoption stops what is left of the VM: without its backend or channel nobody can reach it.
 */
const ADOPT_STEPS: readonly Step<Boot>[] = [
  {
    name: "claim processes",
    run: async (boot, step) => {
      const { cfg, dir } = boot;
      const processes = boot.adopting ?? [];
      const qemu = processes.find((p) => p.name === "qemu");
      const backend = cfg.channel === "vsock" ? processes.find((p) => p.name === "vhost-device-vsock") : undefined;
      // Registered in boot order before any check, so a refused adoption leaves nothing running.
      step.onCleanup("remove vm record", () => removeVmRecord(dir.root));
      step.onCleanup("remove sockets", () => removeSockets(dir));
      if (backend !== undefined) step.onCleanup("stop vsock backend", async () => { await backend.stop(1_000); });
      if (qemu !== undefined) step.onCleanup("stop qemu", async () => { await qemu.stop(1_000); });
      const needed = [{ name: "qemu", p: qemu }, ...(cfg.channel === "vsock" ? [{ name: "vhost-device-vsock", p: backend }] : [])];
      for (const { name, p } of needed) {
        if (p === undefined) throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: its ${name} process is not among the adopted ones (${processes.map((x) => x.name).join(", ") || "none"})`);
        if (!p.running) throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: its ${name} process has exited (${describeExit(await p.exited())})`);
      }
      if (qemu === undefined) return; // checked above
      boot.qemu = qemu;
      if (backend !== undefined) boot.backend = backend;
      boot.argv = buildQemuArgv({ ...cfg.machine, consoleLog: dir.serialLog(), ...guestChannelOf(cfg, dir) });
    },
  },
  {
    name: "check channel",
    run: async ({ cfg, dir }) => {
      const socket = cfg.channel === "vsock" ? dir.vsockUds() : cfg.channel === "serial" ? dir.agentSocket() : undefined;
      if (socket === undefined) return;
      if ((await stat(socket).catch(() => undefined))?.isSocket() !== true) {
        throw terminalError("VmAdoptFailed", `Cannot adopt VM in ${dir.root}: its guest channel socket ${socket} is missing`);
      }
    },
  },
  FOLLOW_CONSOLE,
];

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
  readonly #exited: Promise<QemuExit>;
  #tornDown: Promise<void> | undefined;
  #stopping: Promise<QemuExit> | undefined;

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
    this.#exited = this.#qemu.exited().then(async (exit) => {
      // Read the console to its end first: a panic line says why better than QEMU's exit does.
      await this.serial.poll();
      this.#markDown(terminalError("QemuExited", `Cannot reach guest: QEMU exited (${describeExit(exit)})${await qemuLogSuffix(this.dir.qemuLog())}`, { context: { serialLog: this.serial.path } }));
      this.#logger.info({ vm: this.spec.name, dir: this.dir.root, exit: describeExit(exit) }, "qemu exited");
      return exit;
    });
    void this.#exited.then(() => this.#teardown());
  }

  /** Starts the VM. Rejects with a classified error, leaving nothing running and no socket behind. */
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
    const run = await runSteps(BOOT_STEPS, boot, {
      logger: cfg.logger,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      onFailure: (step, err) => cfg.logger.warn({ vm: spec.name, step, error: describeError(err) }, "qemu boot failed"),
    });
    const vm = new QemuVm(spec, boot as Required<Boot>, run);
    cfg.logger.info({ vm: spec.name, pid: vm.pid, dir: boot.dir.root, channel: cfg.channel, steps: run.timings }, "qemu started");
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

  get running(): boolean {
    return this.#qemu.running;
  }

  /** The guest agent answered: from now on the console is the workload's, and no line of it is fatal. */
  guestReady(): void {
    this.serial.disarm();
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
              return await connectUnix(this.dir.agentSocket());
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
   * Stops QEMU (SIGTERM, then SIGKILL after `graceMs`), then its vsock backend, removes the sockets
   * and reads the console to its end. Idempotent; returns how QEMU ended (which may be its own
   * earlier exit).
   */
  stop(graceMs = 3_000): Promise<QemuExit> {
    this.#stopping ??= (async () => {
      await this.#qemu.stop(graceMs);
      const exit = await this.#exited;
      await this.#teardown();
      return exit;
    })();
    return this.#stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** QEMU connects to the backend's control socket at startup, so it must exist first. */
async function waitForControlSocket(backend: VmmProcess, dir: QemuVmDir, cfg: BootConfig, signal: AbortSignal): Promise<void> {
  const deadline = cfg.clock.now() + cfg.backendReadyTimeoutMs;
  for (;;) {
    signal.throwIfAborted();
    if (!backend.running) {
      throw terminalError("VsockBackendExited", `Cannot start vhost-device-vsock: it exited (${describeExit(await backend.exited())}); see ${dir.backendLog()}`);
    }
    if ((await stat(dir.vhostUserSocket()).catch(() => undefined))?.isSocket() === true) return;
    if (cfg.clock.now() > deadline) {
      throw retryableError("VsockBackendTimeout", `Cannot start vhost-device-vsock: no control socket within ${cfg.backendReadyTimeoutMs} ms; see ${dir.backendLog()}`);
    }
    await cfg.clock.sleep(20, signal);
  }
}

async function removeSockets(dir: QemuVmDir): Promise<void> {
  await Promise.all(dir.sockets().map((path) => rm(path, { force: true })));
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
    drives: m.drives.map((d, i) => ({ id: d.id, path: d.path, readOnly: d.readOnly === true, isRoot: i === 0 })),
    ...(m.tap === undefined ? {} : { network: m.tap }),
    guestCid,
  };
}

function connectUnix(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path });
    socket.once("connect", () => {
      socket.removeAllListeners("error");
      resolve(socket);
    });
    socket.once("error", (err) => {
      socket.destroy();
      reject(retryableError("SerialConnectFailed", `Cannot connect to ${path}: ${err.message}`, { cause: err }));
    });
  });
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
