/**
 * QEMU's boot and adoption as named steps (`runSteps`), with their cleanups registered as each
 * resource is acquired: a boot creates the VM's processes, an adoption takes over those of an earlier
 * agent run and registers the same cleanups in the same order, so stop and rollback behave alike.
 */
import { mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { describeError, ImpError, retryableError, silentLogger, systemClock, terminalError, type Clock, type Logger, type Step } from "../../../shared/index.ts";
import { ConsoleLog, DEFAULT_MAX_CONSOLE_BYTES, supervisedConsoleBound } from "../console-log.ts";
import type { ProcessLauncher, VmExit, VmMemorySnapshot, VmmProcess, VmSpec } from "../types.ts";
import { removeVmRecord, writeVmRecord } from "../vm-record.ts";
import { buildQemuArgv, type QemuGuestChannel, type QemuMachineSpec } from "./argv.ts";
import { loadMemorySnapshot } from "./memory-snapshot.ts";
import { QmpClient } from "./qmp.ts";
import { assertExecutable, describeExit } from "./child.ts";
import type { QemuVmDir } from "./layout.ts";

/** The guest agent's vsock port and virtio-serial port name (docs/guest-protocol.md). */
export const DEFAULT_GUEST_VSOCK_PORT = 10700;
export const DEFAULT_SERIAL_PORT_NAME = "imp.agent";

export type QemuChannelKind = "vsock" | "serial" | "none";


export interface QemuVmOptions {
  /** This VM's own directory: sockets, serial log, backend log. Created if missing. Keep it short (Unix socket paths ≤ 107 bytes). */
  readonly dir: string;
  readonly machine: Omit<QemuMachineSpec, "channel" | "consoleLog" | "memoryFile" | "qmpSocket" | "incoming">;
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
   * Save this VM as a snapshot template, or restore it from one (memory-snapshot.ts). Either needs
   * the template's very machine (devices, ids, kernel, memory, accelerator); drive and socket paths
   * may differ. Neither can use the vsock channel.
   */
  readonly snapshot?: VmMemorySnapshot;
  /** How long loading a snapshot may take before the restore fails (default 30 s). */
  readonly snapshotLoadTimeoutMs?: number;
  /**
   * Console bytes the guest may write to `serial.log` before the VM is marked down with
   * `GuestConsoleFlood` (the file is on the node's disk and QEMU does not bound it). Default 16 MiB.
   */
  readonly maxConsoleBytes?: number;
}

export type QemuExit = VmExit;

export function defaultQemuVmConfig(): Required<Pick<QemuVmOptions, "qemuBinary" | "guestCid" | "serialPortName" | "dieWithParent" | "backendReadyTimeoutMs" | "logger" | "clock" | "maxConsoleBytes" | "snapshotLoadTimeoutMs">> {
  return {
    snapshotLoadTimeoutMs: 30_000,
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

/** The names of QEMU's boot and adoption steps, as logs and step timings carry them. */
export type QemuStepName = "check-binaries" | "prepare-directory" | "start-vsock-backend" | "start-qemu" | "follow-console" | "claim-processes" | "check-channel" | "load-snapshot";
export type BootConfig = ReturnType<typeof defaultQemuVmConfig> & QemuVmOptions;

/** What the boot steps acquire, in order. */
export interface Boot {
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

export function guestChannelOf(cfg: BootConfig, dir: QemuVmDir): { channel?: QemuGuestChannel } {
  if (cfg.channel === "vsock") return { channel: { kind: "vsock", vhostUserSocket: dir.vhostUserSocket() } };
  if (cfg.channel === "serial") return { channel: { kind: "serial", socketPath: dir.agentSocket(), portName: cfg.serialPortName } };
  return {};
}

/** The machine QEMU is given: the caller's, plus its RAM file, monitor and `-incoming` for a snapshot role. */
export function machineOf(cfg: BootConfig, dir: QemuVmDir): QemuMachineSpec {
  const role = cfg.snapshot;
  return {
    ...cfg.machine,
    consoleLog: dir.serialLog(),
    ...guestChannelOf(cfg, dir),
    ...(role === undefined ? {} : { memoryFile: { path: role.memoryFile, share: role.role === "template" }, qmpSocket: dir.qmpSocket() }),
    ...(role?.role === "restore" ? { incoming: true } : {}),
  };
}

const FOLLOW_CONSOLE: Step<Boot, QemuStepName> = {
  name: "follow-console",
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

export const BOOT_STEPS: readonly Step<Boot, QemuStepName>[] = [
  {
    name: "check-binaries",
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
    name: "prepare-directory",
    run: async ({ cfg, spec, dir }, step) => {
      await mkdir(dir.root, { recursive: true });
      // Stale sockets of an earlier boot would make the backend's bind fail or a dial reach nothing.
      await removeSockets(dir);
      step.onCleanup("remove sockets", () => removeSockets(dir));
      // The console follower and the backend's log watch read from the start: this boot's lines only.
      await writeFile(dir.serialLog(), "");
      await writeFile(dir.backendLog(), "");
      // What a restarted agent needs to adopt this VM; gone with the VM (a stale one would mislead).
      if (cfg.channel === "none") return;
      step.onCleanup("remove vm record", () => removeVmRecord(dir.root));
      await writeVmRecord(dir.root, { driver: "qemu", channel: cfg.channel, spec });
    },
  },
  {
    name: "start-vsock-backend",
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
    name: "start-qemu",
    run: async (boot, step) => {
      const { cfg, dir } = boot;
      const argv = buildQemuArgv(machineOf(cfg, dir));
      boot.argv = argv;
      const qemu = await boot.launcher.launch({ name: "qemu", binary: cfg.qemuBinary, args: argv, stdoutPath: dir.qemuLog(), stderrPath: dir.qemuLog(), boundFile: { path: dir.serialLog(), maxBytes: supervisedConsoleBound(cfg.maxConsoleBytes) } });
      boot.qemu = qemu;
      step.onCleanup("stop qemu", async () => { await qemu.stop(1_000); });
    },
  },
  FOLLOW_CONSOLE,
];

/**
 * A restore: the boot's steps with QEMU started paused (`-incoming defer`), then the template's
 * device state loaded and the guest resumed where the template stopped. A load that fails or hangs
 * rolls back like any failed boot step: nothing is left running.
 */
export const RESTORE_STEPS: readonly Step<Boot, QemuStepName>[] = [
  ...BOOT_STEPS,
  {
    name: "load-snapshot",
    run: async ({ cfg, dir, qemu }, step) => {
      const role = cfg.snapshot;
      if (role?.role !== "restore" || qemu === undefined) throw terminalError("VmSpecInvalid", "Cannot restore a VM without a snapshot to restore it from");
      // QEMU ends itself when a load fails (or before its monitor exists, when it cannot open the
      // RAM file): its exit, with its own words, ends the wait at once instead of a timeout.
      const gone = new AbortController();
      // Only once QEMU's monitor answered is an exit the load's doing; before, it is QEMU's start
      // failing (a tap, memory), which says nothing about the snapshot.
      let monitorUp = false;
      const exited = qemu.exited().then(async (exit) => {
        gone.abort();
        const why = `(${describeExit(exit)})${await logTail(dir.qemuLog())}`;
        throw monitorUp ? retryableError("SnapshotLoadFailed", `Cannot restore the VM from its snapshot: QEMU exited while loading it ${why}`) : retryableError("QemuExited", `Cannot restore the VM: QEMU exited before its monitor answered ${why}`);
      });
      exited.catch(() => undefined);
      const load = (async () => {
        const signal = AbortSignal.any([step.signal, gone.signal]);
        const qmp = await QmpClient.connect(dir.qmpSocket(), { timeoutMs: cfg.snapshotLoadTimeoutMs, signal });
        monitorUp = true;
        try {
          const { ms, stateBytes } = await loadMemorySnapshot(qmp, role.statePath, { timeoutMs: cfg.snapshotLoadTimeoutMs, clock: cfg.clock, signal });
          cfg.logger.info({ dir: dir.root, ms, stateBytes }, "qemu snapshot loaded");
        } finally {
          qmp.close();
        }
      })();
      try {
        await Promise.race([load, exited]);
      } catch (err) {
        // The monitor closing often comes a moment before QEMU's exit is known: wait for its words, briefly.
        if (step.signal.aborted) throw err;
        const exitError = await Promise.race([exited.then(() => undefined, (e: unknown) => e), cfg.clock.sleep(QEMU_EXIT_GRACE_MS).then(() => undefined, () => undefined)]);
        if (exitError !== undefined) throw exitError;
        // A refused path or another classified error is what it is; what went wrong talking to a
        // running QEMU about the load is the load's.
        if (err instanceof ImpError && !err.code.startsWith("Qmp") && err.code !== "Timeout") throw err;
        throw retryableError(monitorUp ? "SnapshotLoadFailed" : "QemuExited", `Cannot restore the VM from its snapshot: ${describeError(err)}`, { cause: err });
      }
    },
  },
];

/** How long a failed load waits for QEMU's exit, whose log says why better than a closed socket. */
const QEMU_EXIT_GRACE_MS = 2_000;

/** "; qemu: <its last lines>", or "" — QEMU's own words for why it exited. */
async function logTail(path: string): Promise<string> {
  const text = (await readFile(path, "utf8").catch(() => "")).trim();
  return text === "" ? "" : `; qemu: ${text.split("\n").slice(-3).join(" | ").slice(-600)}`;
}

/**
 * Adoption of a VM another agent run started: the same resources as a boot, taken over instead of
 * created, with the same cleanups registered in the same order (so stop and rollback behave alike).
 * A failed adoption stops what is left of the VM: without its backend or channel nobody can reach it.
 */
export const ADOPT_STEPS: readonly Step<Boot, QemuStepName>[] = [
  {
    name: "claim-processes",
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
      boot.argv = buildQemuArgv(machineOf(cfg, dir));
    },
  },
  {
    name: "check-channel",
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
