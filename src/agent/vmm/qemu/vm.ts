import { createConnection, type Socket } from "node:net";
import { mkdir, stat } from "node:fs/promises";
import { closeSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import {
  retryableError,
  silentLogger,
  terminalError,
  withDeadline,
  type ImpError,
  type Logger,
} from "../../../shared/index.ts";
import { dialHybridVsock } from "../../vsock/index.ts";
import { buildQemuArgv, type QemuGuestChannel, type QemuMachineSpec } from "./argv.ts";
import { assertExecutable, Child, describeExit, type ChildExit } from "./child.ts";
import { SerialLog } from "./serial-log.ts";

/** The guest agent's vsock port and virtio-serial port name (docs/guest-protocol.md). */
export const DEFAULT_GUEST_VSOCK_PORT = 10700;
export const DEFAULT_SERIAL_PORT_NAME = "imp.agent";

export type QemuChannelKind = "vsock" | "serial" | "none";

export interface QemuVmOptions {
  /** This VM's own directory: sockets, serial log, backend log. Created if missing. Keep it short (Unix socket paths ≤ 107 bytes). */
  readonly dir: string;
  readonly machine: Omit<QemuMachineSpec, "channel">;
  readonly channel: QemuChannelKind;
  readonly qemuBinary?: string;
  /** rust-vmm vhost-device-vsock binary; required for channel "vsock". */
  readonly vhostDeviceVsock?: string;
  /** Guest CID for vsock (≥ 3). */
  readonly guestCid?: number;
  readonly serialPortName?: string;
  /** Kill QEMU and its backend when this process dies (tests). A node agent leaves this off. */
  readonly dieWithParent?: boolean;
  /** How long the vsock backend may take to create its control socket. */
  readonly backendReadyTimeoutMs?: number;
  readonly logger?: Logger;
}

export type QemuExit = ChildExit;

export function defaultQemuVmConfig(): Required<Pick<QemuVmOptions, "qemuBinary" | "guestCid" | "serialPortName" | "dieWithParent" | "backendReadyTimeoutMs" | "logger">> {
  return {
    qemuBinary: "qemu-system-x86_64",
    guestCid: 3,
    serialPortName: DEFAULT_SERIAL_PORT_NAME,
    dieWithParent: false,
    backendReadyTimeoutMs: 5_000,
    logger: silentLogger,
  };
}

/** Where a QEMU VM keeps its files. The only place that builds these paths. */
export class QemuVmDir {
  readonly root: string;
  constructor(root: string) {
    // sun_path is 108 bytes including the NUL; the longest name below is 15 bytes.
    if (Buffer.byteLength(join(root, "vhost-user.sock")) > 107) {
      throw terminalError("qemu.dir_too_long", `Cannot use VM directory ${root}: Unix socket paths inside it would exceed 107 bytes`);
    }
    this.root = root;
  }
  serialLog(): string { return join(this.root, "serial.log"); }
  qemuLog(): string { return join(this.root, "qemu.log"); }
  backendLog(): string { return join(this.root, "vhost-device-vsock.log"); }
  /** vhost-user control socket between QEMU and vhost-device-vsock. */
  vhostUserSocket(): string { return join(this.root, "vhost-user.sock"); }
  /** Hybrid-vsock Unix socket the host dials (`CONNECT <port>`), as Firecracker's `uds_path`. */
  vsockUds(): string { return join(this.root, "vsock.sock"); }
  /** virtio-serial agent port, QEMU listening. */
  agentSocket(): string { return join(this.root, "agent.sock"); }
}

/**
 * One QEMU microvm process (plus its vhost-device-vsock backend for the vsock channel). `start()`
 * spawns and returns at once; the guest's readiness is the caller's business via
 * {@link QemuVm.connectGuest}, which is bounded and fails fast when QEMU exits or the console shows a
 * kernel panic / initramfs failure. The serial console is captured to `dir/serial.log`.
 * Always `stop()` (or `await using`): it is idempotent and never leaves a process behind.
 */
export class QemuVm implements AsyncDisposable {
  readonly dir: QemuVmDir;
  readonly serial: SerialLog;
  readonly channel: QemuChannelKind;
  readonly argv: readonly string[];
  readonly #qemu: Child;
  readonly #backend: Child | undefined;
  readonly #down: AbortController;
  readonly #logger: Logger;
  #stopping: Promise<QemuExit> | undefined;
  #stderrTail = "";

  private constructor(dir: QemuVmDir, channel: QemuChannelKind, argv: string[], qemu: Child, backend: Child | undefined, serial: SerialLog, down: AbortController, logger: Logger) {
    this.#down = down;
    this.dir = dir;
    this.channel = channel;
    this.argv = argv;
    this.#qemu = qemu;
    this.#backend = backend;
    this.serial = serial;
    this.#logger = logger;
  }

  /** Spawns the VM. Rejects (leaving nothing running) if QEMU or the vsock backend cannot start. */
  static async start(options: QemuVmOptions): Promise<QemuVm> {
    const cfg = { ...defaultQemuVmConfig(), ...stripUndefined(options) };
    const dir = new QemuVmDir(options.dir);
    await assertExecutable("qemu", cfg.qemuBinary);
    if (options.channel === "vsock" && options.vhostDeviceVsock !== undefined) await assertExecutable("vhost-device-vsock", options.vhostDeviceVsock);
    await mkdir(dir.root, { recursive: true });

    let channel: QemuGuestChannel | undefined;
    let backend: Child | undefined;
    if (options.channel === "vsock") {
      if (options.vhostDeviceVsock === undefined) {
        throw terminalError("qemu.no_vsock_backend", "Cannot start a VM with vsock under QEMU: no vhost-device-vsock binary given");
      }
      backend = await startVsockBackend(dir, options.vhostDeviceVsock, cfg.guestCid, cfg.dieWithParent, cfg.backendReadyTimeoutMs);
      channel = { kind: "vsock", vhostUserSocket: dir.vhostUserSocket() };
    } else if (options.channel === "serial") {
      channel = { kind: "serial", socketPath: dir.agentSocket(), portName: cfg.serialPortName };
    }

    let argv: string[];
    let qemu: Child;
    try {
      argv = buildQemuArgv(channel === undefined ? options.machine : { ...options.machine, channel });
      qemu = new Child("qemu", cfg.qemuBinary, argv, { stdio: ["ignore", "pipe", "pipe"], dieWithParent: cfg.dieWithParent });
      await qemu.spawned();
    } catch (err) {
      await backend?.stop(1_000);
      throw err;
    }

    const down = new AbortController();
    const serial = new SerialLog(dir.serialLog(), {
      onFatal: (line) => {
        if (!down.signal.aborted) {
          down.abort(terminalError("guest.boot_failed", `Cannot boot guest: console says ${JSON.stringify(line)}`, { context: { serialLog: dir.serialLog() } }));
        }
      },
    });
    const vm = new QemuVm(dir, options.channel, argv, qemu, backend, serial, down, cfg.logger);
    vm.#wire();
    cfg.logger.info({ pid: qemu.pid, dir: dir.root, channel: options.channel }, "qemu started");
    return vm;
  }

  #wire(): void {
    const { stdout, stderr } = this.#qemu.process;
    stdout?.on("data", (chunk: Buffer) => this.serial.push(chunk));
    const qemuLog = openSync(this.dir.qemuLog(), "a");
    stderr?.on("data", (chunk: Buffer) => {
      this.#stderrTail = (this.#stderrTail + chunk.toString("utf8")).slice(-4096);
      try {
        writeSync(qemuLog, chunk);
      } catch {
        // the tail above still carries QEMU's words into error messages
      }
    });
    void this.#qemu.exited().then(async (exit) => {
      closeSync(qemuLog);
      this.#markDown(terminalError("qemu.exited", `Cannot reach guest: QEMU exited (${describeExit(exit)})${this.#stderrSuffix()}`, { context: { serialLog: this.serial.path } }));
      await this.#backend?.stop(1_000);
      await this.serial.close();
      this.#logger.info({ dir: this.dir.root, exit: describeExit(exit) }, "qemu exited");
    });
  }

  #stderrSuffix(): string {
    const text = this.#stderrTail.trim();
    return text === "" ? "" : `; qemu: ${text.split("\n").slice(-3).join(" | ")}`;
  }

  #markDown(reason: ImpError): void {
    if (!this.#down.signal.aborted) this.#down.abort(reason);
  }

  get pid(): number | undefined {
    return this.#qemu.pid;
  }

  get running(): boolean {
    return this.#qemu.running;
  }

  /** Aborts once the VM can no longer come up (QEMU exited, kernel panic, initramfs failure); its reason says why. */
  get downSignal(): AbortSignal {
    return this.#down.signal;
  }

  /** Resolves when QEMU has exited; its whole console is then in `serial.tail()` (the file is complete after `stop()`). */
  exited(): Promise<QemuExit> {
    return this.#qemu.exited();
  }

  /**
   * A byte stream to the guest agent: over vsock, a hybrid-vsock dial of `port` that retries until
   * the guest listens; over virtio-serial, a connection to QEMU's port socket (the guest may not have
   * opened its end yet — callers repeat their first request until answered). Bounded by `timeoutMs`;
   * fails at once with the VM's down reason when it stops or panics.
   */
  async connectGuest(options: {
    readonly timeoutMs: number;
    readonly port?: number;
    readonly signal?: AbortSignal;
    /** vsock only: each failed (temporary) dial attempt, e.g. while the guest still boots. */
    readonly onAttemptFailed?: (err: ImpError, attempt: number) => void;
  }): Promise<Socket> {
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
        throw terminalError("qemu.no_channel", "Cannot connect to guest: the VM was started without a guest channel");
    }
  }

  /**
   * Stops QEMU (SIGTERM, then SIGKILL after `graceMs`) and its backend, and waits until the console is
   * captured. Idempotent; returns how QEMU ended (which may be its own earlier exit).
   */
  stop(graceMs = 3_000): Promise<QemuExit> {
    this.#stopping ??= (async () => {
      const exit = await this.#qemu.stop(graceMs);
      await this.#backend?.stop(1_000);
      await this.serial.close();
      return exit;
    })();
    return this.#stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

async function startVsockBackend(dir: QemuVmDir, binary: string, guestCid: number, dieWithParent: boolean, readyTimeoutMs: number): Promise<Child> {
  if (!Number.isInteger(guestCid) || guestCid < 3 || guestCid > 0xffff_fffe) throw new RangeError(`Cannot use guest CID ${guestCid}`);
  const log = openSync(dir.backendLog(), "a");
  let backend: Child;
  try {
    backend = new Child("vhost-device-vsock", binary, ["--vm", `guest-cid=${guestCid},socket=${dir.vhostUserSocket()},uds-path=${dir.vsockUds()}`], {
      stdio: ["ignore", log, log],
      dieWithParent,
    });
  } finally {
    closeSync(log);
  }
  try {
    await backend.spawned();
    // QEMU connects to the control socket at startup, so it must exist first.
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      if (!backend.running) {
        throw terminalError("qemu.vsock_backend_exited", `Cannot start vhost-device-vsock: it exited (${describeExit(await backend.exited())}); see ${dir.backendLog()}`);
      }
      if ((await stat(dir.vhostUserSocket()).catch(() => undefined))?.isSocket() === true) return backend;
      if (Date.now() > deadline) {
        throw retryableError("qemu.vsock_backend_timeout", `Cannot start vhost-device-vsock: no control socket within ${readyTimeoutMs} ms; see ${dir.backendLog()}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  } catch (err) {
    await backend.stop(1_000);
    throw err;
  }
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
      reject(retryableError("qemu.serial_connect_failed", `Cannot connect to ${path}: ${err.message}`, { cause: err }));
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
