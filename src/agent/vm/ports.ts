/**
 * What the VM lifecycle needs from the world, as narrow interfaces its callers fill in: the node
 * agent (images from the node's cache, the node network, supervised processes, the API for the
 * ambiguous handoff) and `imp run` (its own image store, no network, direct children, streamed
 * output). The steps in `boot-steps.ts` see only these.
 */
import type { CachedImage } from "../image/cache/index.ts";
import type { VmDisks } from "../image/disks/index.ts";
import type { CredentialLookup } from "../image/pull/index.ts";
import type { NetworkConfig, OutputEvent } from "../guest/index.ts";
import type { ProcessLauncher, VmmDriver, VmmKind, VmmProcess } from "../vmm/index.ts";
import type { VmDir } from "./vm-dir.ts";

/** The kernel a VM boots: files on the node and the arguments the kernel itself needs. */
export interface KernelFiles {
  readonly kernel: string;
  readonly initrd?: string;
  /** Kernel arguments this kernel needs on top of Imp's own (e.g. `console=ttyS0`). */
  readonly args: readonly string[];
}

export interface VmImageRequest {
  readonly image: string;
  readonly extraLayers: readonly string[];
  /** Registry credentials (in memory only). */
  readonly credentials?: CredentialLookup;
}

/** Everything the boot steps need to know of one VM. Data only. */
export interface VmBootRequest {
  /** Names the VM's directory (the ImpVM uid, or `imp run`'s own id). */
  readonly id: string;
  /** The guest hostname and the VM's name in logs. */
  readonly name: string;
  readonly vmm: VmmKind;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly scratchBytes: number;
  readonly image: VmImageRequest;
  readonly kernel: KernelFiles;
  /** The template's kernel arguments, already checked. */
  readonly bootArgs: readonly string[];
  /** Absent: no network device at all (egress `none`, or `imp run`). */
  readonly network?: { readonly egress: "internet" | "restricted"; readonly allowedCIDRs: readonly string[] };
  /** The workload waits for a one-time runner setup (`awaitSetup`) before it starts. */
  readonly requiresSetup: boolean;
  /** How the workload receives its setup: in its environment, or on its stdin (read once, in no environment). */
  readonly setupDelivery?: "Environment" | "Stdin";
  readonly workload: VmWorkload;
  /** `Snapshot`: restore the node's memory snapshot of this VM's template where there is one (docs/snapshots.md). Default `Boot`. */
  readonly startFrom?: "Boot" | "Snapshot";
  /** A clone of this cache volume's latest generation, mounted at its paths (docs/caches.md). */
  readonly cache?: VmCacheRequest;
}

/** A VM's cache volume: which one (a namespace's volume of one size), and where the guest mounts it. */
export interface VmCacheRequest {
  readonly namespace: string;
  readonly volume: string;
  readonly sizeBytes: number;
  readonly paths: readonly string[];
}

export interface VmWorkload {
  readonly argv: readonly string[];
  /** Literal variables and those read from Secrets. Secret: never log. */
  readonly env: Readonly<Record<string, string>>;
  readonly cwd?: string;
  readonly uid?: number;
  readonly gid?: number;
}

/** A VM's network on this node: its tap, and the guest side handed over by the guest agent's configure. */
export interface VmNetworkLease {
  readonly tap: string;
  readonly mac: string;
  readonly guest: NetworkConfig;
}

export interface VmNetworkProvider {
  attach(vmId: string, policy: NonNullable<VmBootRequest["network"]>): Promise<VmNetworkLease>;
  /** Idempotent: detaching a VM that has no network is a no-op. */
  detach(vmId: string): Promise<void>;
}

export interface VmImageSource {
  ensure(request: VmImageRequest, signal?: AbortSignal): Promise<CachedImage>;
  disks(vmDir: string, image: CachedImage, scratchBytes: number): Promise<VmDisks>;
}

/** How VM processes are started and where guest CIDs come from. */
export interface VmLaunchPorts {
  readonly drivers: ReadonlyMap<VmmKind, VmmDriver>;
  /** Directly (tests, `imp run`) or under the VM's own supervisor (outlives an agent restart). */
  launcherFor(request: Pick<VmBootRequest, "id" | "memoryMiB">, dir: VmDir, driver: Pick<VmmDriver, "memoryOverheadMiB">): ProcessLauncher;
  /** Processes of this VM that an earlier agent run started and that still exist (re-adoption, release). */
  adoptProcesses?(dir: VmDir): Promise<readonly VmmProcess[]>;
  /** A guest CID unique on this node; the same id gets the same CID until released. */
  allocateCid(id: string): number;
  releaseCid(id: string): void;
}

/** Names a VM in the API (for the writes the runtime asks its owner to make). */
export interface VmRef {
  readonly uid: string;
  readonly name: string;
  readonly namespace: string;
}

/**
 * Where a VM's one-time setup lives outside the node, and its handoff is recorded (for the node
 * agent: the ImpVM's status). The runtime records the Exec before it leaves and removes the sealed
 * material once the VM is released; the node agent reads the sealed setup (and alone holds the key
 * that opens it).
 */
export interface SetupStore {
  /** The sealed setup as stored; undefined while it is not there yet. Throws if what is there is not this VM's. */
  readSealed(vm: VmRef, signal?: AbortSignal): Promise<string | undefined>;
  /** Records durably that the Exec is about to leave (ambiguous-handoff rule); if it throws, nothing is sent. */
  recordSent(vm: VmRef, execId: string, signal: AbortSignal): Promise<void>;
  /** Removes the sealed setup (and any sealed inputs) and records that it is gone. Idempotent, also for a VM that never had one. */
  delete(vm: VmRef): Promise<void>;
}

/** What the exec step reports and asks outside the VM. */
export interface WorkloadPorts {
  /**
   * Waits until the one-time setup can be handed over and returns it in plain text (only for
   * requests with `requiresSetup`). The node agent resolves it when its decision says so; a stop
   * aborts the wait through the step's signal.
   */
  awaitSetup?(id: string, signal: AbortSignal): Promise<string>;
  /** Records durably that the Exec is about to leave (ambiguous-handoff rule); if it throws, nothing is sent. */
  recordSent(id: string, execId: string, signal: AbortSignal): Promise<void>;
  /** The workload's output as the guest streams it (`imp run` writes it through; the agent keeps none). */
  onOutput?(event: OutputEvent): void;
}

export interface RuntimeTimeouts {
  /** VMM start → guest hello. */
  readonly bootMs: number;
  /** Graceful stop before kill. */
  readonly stopGraceMs: number;
  /** A runner VM waits this long for its sealed setup (the decision stops it then). */
  readonly setupWaitMs: number;
  /** One guest request. */
  readonly requestMs: number;
  /** After the workload exited, how long the guest may take to power off before it is stopped. */
  readonly powerOffMs: number;
  /** A restore from a memory snapshot must reach a configured guest within this, or the VM boots instead. */
  readonly restoreMs: number;
}

/** The PATH a workload starts with unless it sets its own (the kernel gives init almost none). */
export const DEFAULT_WORKLOAD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/**
 * The environment workloads start with, below their own (the node agent's and `imp run`'s): a
 * hosted runner's jobs run in a UTF-8 locale (C.UTF-8 is built into glibc, so every Debian-based
 * image has it); without LANG, tools fall back to ASCII and mangle non-ASCII output and file names.
 */
export const DEFAULT_WORKLOAD_ENV: Readonly<Record<string, string>> = { PATH: DEFAULT_WORKLOAD_PATH, HOME: "/root", LANG: "C.UTF-8" };

export const DEFAULT_RUNTIME_TIMEOUTS: RuntimeTimeouts = { bootMs: 120_000, stopGraceMs: 10_000, setupWaitMs: 300_000, requestMs: 30_000, powerOffMs: 15_000, restoreMs: 60_000 };
