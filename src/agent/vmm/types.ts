import type { VmStopReport } from "./stop-ladder.ts";
import type { Socket } from "node:net";
import type { ChildExit, Clock, ImpError, Logger } from "../../shared/index.ts";
import type { ShutdownMode } from "../guest/index.ts";

/**
 * The VMM-neutral driver interface. A node agent prepares a VM's files, starts the VMM, connects to
 * the guest agent, and stops it; QEMU (`-M microvm`) and Firecracker implement it. Everything a driver
 * starts is a {@link VmmProcess} obtained from a {@link ProcessLauncher}, so the same driver runs its
 * VMM as a direct child (tests, `imp run`) or under the per-VM supervisor (the node agent), whose
 * processes outlive an agent restart.
 */
export type VmmKind = "qemu" | "firecracker";

export interface VmDrive {
  /** Stable device id (`root`, `scratch`); Firecracker's drive_id, QEMU's drive id. */
  readonly id: string;
  readonly path: string;
  readonly readOnly: boolean;
  /** The root device (first virtio-blk device, `/dev/vda`). Exactly one drive is root. */
  readonly isRoot: boolean;
  /**
   * The file's format; default raw. `qcow2` only for the copy-on-write clones Imp itself creates
   * (cache volumes, src/agent/cache/) and only under QEMU (Firecracker takes raw files): a qcow2
   * header names other host files as its backing, so a qcow2 file from anywhere else is never attached.
   */
  readonly format?: "raw" | "qcow2";
  /**
   * For a qcow2 drive: the raw file beneath it. Named on QEMU's command line with its format, so
   * the clone's header (which a clone's owner could have written) never chooses what QEMU opens.
   */
  readonly backing?: string;
}

export interface VmNetwork {
  /** A tap device that exists on the host (in `netns` if given) before the VMM starts. */
  readonly tap: string;
  /** The guest interface's MAC, `xx:xx:xx:xx:xx:xx`. */
  readonly mac: string;
}

/** Everything a driver needs to boot one VM. Paths are absolute and already exist. */
export interface VmSpec {
  /** Names the VM in logs and errors (the ImpVM name, or `imp run`'s id). */
  readonly name: string;
  /** The VM's own directory: sockets, logs, config. Short (Unix socket paths ≤ 107 bytes). */
  readonly dir: string;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly kernel: string;
  readonly initrd?: string;
  /** The full kernel command line, as the driver must pass it. */
  readonly cmdline: string;
  readonly drives: readonly VmDrive[];
  readonly network?: VmNetwork;
  /** Guest CID for vsock, ≥ 3. */
  readonly guestCid: number;
  /**
   * This VM's part in memory snapshots (docs/snapshots.md), only where the driver has
   * `memorySnapshots`: a template keeps its RAM in `memoryFile` and is saved with `saveSnapshot`; a
   * restored VM maps the template's `memoryFile` copy-on-write and resumes from `statePath`. Both
   * must have the template's very machine (shape, kernel, command line, devices); paths may differ.
   */
  readonly memorySnapshot?: VmMemorySnapshot;
}

export type VmMemorySnapshot =
  | { readonly role: "template"; readonly memoryFile: string }
  | { readonly role: "restore"; readonly memoryFile: string; readonly statePath: string };

/**
 * What a VMM's memory cgroup saw, read by its supervisor as it exited: whether the kernel's OOM
 * killer ended something in it (the VM's limit was reached), its peak and its limit.
 */
export interface VmmMemoryUse {
  readonly oomKilled: boolean;
  readonly peakBytes?: number;
  readonly limitBytes?: number;
}

/** A file a VMM writes on the node (its console log) that passed its bound, so its supervisor killed it. */
export interface VmmFileBound {
  readonly path: string;
  readonly bytes: number;
  readonly maxBytes: number;
}

/**
 * How a VMM process ended; `memory` where a supervisor kept it in its own cgroup, `fileBound` where
 * its supervisor killed it for writing past a bound.
 */
export type VmExit = ChildExit & { readonly memory?: VmmMemoryUse; readonly fileBound?: VmmFileBound };

/** One process a driver started (the VMM itself, or a helper such as QEMU's vsock backend). */
export interface VmmProcess {
  readonly name: string;
  readonly pid: number;
  /** Resolves once the process has exited (for a supervised process: as the supervisor recorded it). */
  exited(): Promise<VmExit>;
  readonly running: boolean;
  /** Sends a signal; a no-op once the process has exited. */
  signal(signal: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. Idempotent. */
  stop(graceMs: number): Promise<VmExit>;
}

export interface LaunchRequest {
  /** Names the process in logs and errors (`qemu`, `firecracker`, `vhost-device-vsock`). */
  readonly name: string;
  readonly binary: string;
  readonly args: readonly string[];
  /** stdout and stderr go to these files (appended); no pipes, so the process never blocks on us. */
  readonly stdoutPath: string;
  readonly stderrPath: string;
  readonly cwd?: string;
  /**
   * A file the process writes whose size is bounded (the guest's console log): a supervisor kills
   * the process once it is larger, also while no agent runs. A direct launcher leaves this to the
   * agent's own watch of the console, which dies with the agent anyway.
   */
  readonly boundFile?: { readonly path: string; readonly maxBytes: number };
}

/** Starts processes: as direct children ({@link VmmProcess} backed by `Child`) or under a supervisor. */
export interface ProcessLauncher {
  launch(request: LaunchRequest): Promise<VmmProcess>;
}

export interface ConnectGuestOptions {
  readonly timeoutMs: number;
  /** Guest vsock port; default 10700 (the guest agent's). */
  readonly port?: number;
  readonly signal?: AbortSignal;
  readonly onAttemptFailed?: (err: ImpError, attempt: number) => void;
}

/** A started VM. Always `stop()` it (or `await using`): idempotent, leaves no process behind. */
export interface RunningVm extends AsyncDisposable {
  readonly kind: VmmKind;
  readonly spec: VmSpec;
  /** The VMM's pid. */
  readonly pid: number;
  /** Aborts once the VM can no longer come up or has gone (VMM exited, kernel panic); its reason says why. */
  readonly downSignal: AbortSignal;
  /** How the host reaches this VM's guest agent (a VM saved to or restored from a memory snapshot: virtio-serial). */
  readonly guestChannel: "vsock" | "serial";
  /** A byte stream to the guest agent (hybrid vsock), bounded by `timeoutMs`, failing at once when the VM goes down. */
  connectGuest(options: ConnectGuestOptions): Promise<Socket>;
  /**
   * A template VM only (`spec.memorySnapshot.role === "template"`): pauses it, writes its device
   * state to `statePath` and ends the VMM. Its `memoryFile` then holds the rest of the snapshot
   * (QEMU: the RAM file it ran in; Firecracker: written by the save).
   */
  saveSnapshot?(statePath: string, options: { readonly timeoutMs: number }): Promise<{ readonly ms: number; readonly stateBytes: number }>;
  /** Resolves when the VMM has exited. */
  exited(): Promise<VmExit>;
  /**
   * The guest agent answered: console text is no longer evidence of a failed boot (fatal-line
   * patterns are disarmed), since from now on the untrusted workload writes the console too.
   */
  guestReady(): void;
  /**
   * Stops the VM by the one ladder every driver climbs (`stop-ladder.ts`): the graceful request
   * (QEMU: SIGTERM; Firecracker: SendCtrlAltDel), a wait of `graceMs`, the kill; then frees what the
   * driver created (sockets, helper processes). Idempotent.
   */
  stop(graceMs: number): Promise<VmExit>;
  /** Set once stop() has finished: which rung ended the VM, and how long each part took. */
  readonly stopped: VmStopReport | undefined;
}

export interface DriverContext {
  readonly launcher: ProcessLauncher;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** The parts of a kernel command line, in order; the driver adds what its VMM needs. */
export interface KernelCmdlineParts {
  /** The kernel's own arguments (node config, e.g. `console=ttyS0`). */
  readonly kernel: readonly string[];
  /** Imp's: root, init, scratch device. */
  readonly imp: readonly string[];
  /** The VM template's boot arguments. */
  readonly extra: readonly string[];
}

export interface VmmDriver {
  readonly kind: VmmKind;
  /**
   * How the guest must shut down for this VMM to exit: QEMU exits on a power-off; Firecracker has no
   * power-off device and exits on a guest reboot (`reboot=k`).
   */
  readonly shutdownMode: ShutdownMode;
  /**
   * Host memory the VMM process needs beyond the guest's RAM (its own heap, device emulation, and
   * under QEMU's TCG the translated-code buffer): the VM's memory cgroup limit is guest RAM plus this.
   */
  readonly memoryOverheadMiB: number;
  /** The guest channel of the VMs this driver starts: hybrid vsock, or virtio-serial (one stream, hello may be lost). */
  readonly guestChannel: "vsock" | "serial";
  /** Whether `start` honours `spec.memorySnapshot` (QEMU does; Firecracker does unjailed). */
  readonly memorySnapshots: boolean;
  /**
   * Whether a restored VM's VMM opens the snapshot's memory file read-only (Firecracker): restored
   * VMs then map the one file, and none holds a descriptor that could write it. QEMU 7.2 opens it
   * read-write even when it maps it privately, so each restored VM gets its own copy.
   */
  readonly restoreMapsMemoryReadOnly?: boolean;
  /**
   * What of this VMM shapes the machine a memory snapshot restores into (its version, the
   * accelerator): part of a snapshot's key, so a VMM upgraded under a node's snapshots makes new ones.
   */
  snapshotIdentity?(): Promise<string>;
  /** The whole kernel command line for `parts`, with the arguments this VMM needs. Throws a terminal error for an argument it cannot carry. */
  cmdline(parts: KernelCmdlineParts): string;
  /** The file the guest's serial console of a VM with this spec is written to (where exit records are read after the fact). */
  consoleLog(spec: VmSpec): string;
  /** Starts the VM. Rejects with a classified error, leaving nothing running and nothing it created. */
  start(spec: VmSpec, context: DriverContext, signal?: AbortSignal): Promise<RunningVm>;
  /**
   * Takes over a VM this driver started before the agent restarted, from its processes as a
   * supervising launcher re-adopted them and the spec it was started with. Rejects with a terminal
   * error when a process it needs is gone (the VM has then exited), stopping what was left.
   */
  adopt?(spec: VmSpec, processes: readonly VmmProcess[], context: DriverContext): Promise<RunningVm>;
}
