import { classOf, runSteps, terminalError } from "../../../shared/index.ts";
import { vmmVersion } from "../vmm-version.ts";
import type { DriverContext, KernelCmdlineParts, VmmDriver, VmmProcess, VmSpec } from "../types.ts";
import { FirecrackerApi } from "./api-client.ts";
import { assertFirecrackerSpec } from "./api-requests.ts";
import { firecrackerCmdline } from "./cmdline.ts";
import type { JailerOptions } from "./jailer.ts";
import { jailedLayout, unjailedLayout, type FirecrackerLayout } from "./layout.ts";
import { ADOPT_STEPS, BOOT_STEPS, RESTORE_STEPS, mustHave, type BootState, type ResolvedOptions } from "./steps.ts";
import { FirecrackerVm } from "./vm.ts";

export interface FirecrackerDriverOptions {
  readonly firecrackerBinary: string;
  /** Run each VM under the jailer (production). Without it Firecracker runs as a direct process of the launcher. */
  readonly jailer?: JailerOptions;
  /** Spawn to the API answering `GET /`. */
  readonly apiReadyTimeoutMs?: number;
  /** Each configuration request. */
  readonly requestTimeoutMs?: number;
  /** `InstanceStart` loads the kernel and creates the vCPUs: the slowest request. */
  readonly instanceStartTimeoutMs?: number;
  /** After the stop's grace period: SIGTERM, then SIGKILL after this. */
  readonly killGraceMs?: number;
  /** Console bytes a guest may write before its VM is marked down with `GuestConsoleFlood` (default 16 MiB). */
  readonly maxConsoleBytes?: number | undefined;
}

export function defaultFirecrackerDriverConfig(): Required<Pick<FirecrackerDriverOptions, "apiReadyTimeoutMs" | "requestTimeoutMs" | "instanceStartTimeoutMs" | "killGraceMs">> {
  // Generous: measured figures are milliseconds (docs/firecracker.md), but nodes are shared and noisy.
  return { apiReadyTimeoutMs: 10_000, requestTimeoutMs: 10_000, instanceStartTimeoutMs: 30_000, killGraceMs: 2_000 };
}

/**
 * The Firecracker VMM driver: one Firecracker process per VM, configured over its API socket, then
 * `InstanceStart`. Boot is a list of named steps; each registers the cleanup of what it acquired at
 * the moment it acquired it, so a failed boot (or an abort) leaves no process, socket or jail behind.
 */
export class FirecrackerDriver implements VmmDriver {
  readonly kind = "firecracker" as const;
  /** Firecracker has no power-off device; a guest reboot (`reboot=k`) ends it. */
  readonly shutdownMode = "reboot" as const;
  /** Firecracker's own footprint is a few MiB per VM (its documented figure is under 5 MiB); 64 leaves room for its buffers. */
  readonly memoryOverheadMiB = 64;
  readonly guestChannel = "vsock" as const;
  /**
   * Unjailed only: a jailed Firecracker writes and reads snapshot files inside its chroot, which the
   * driver does not link in and out yet (docs/firecracker.md).
   */
  readonly memorySnapshots: boolean;
  /** Firecracker opens a snapshot's memory file read-only and maps it privately: restored VMs share one file. */
  readonly restoreMapsMemoryReadOnly = true;
  readonly #options: ResolvedOptions;
  readonly #version: () => Promise<string>;

  constructor(options: FirecrackerDriverOptions) {
    this.#options = { ...defaultFirecrackerDriverConfig(), ...definedOnly(options), firecrackerBinary: options.firecrackerBinary };
    this.#version = vmmVersion("Firecracker", options.firecrackerBinary);
    this.memorySnapshots = options.jailer === undefined;
  }

  /** Firecracker's version: a snapshot is loaded only by the version that wrote it (its state format is versioned). */
  async snapshotIdentity(): Promise<string> {
    return `firecracker ${await this.#version()} kvm`;
  }

  cmdline(parts: KernelCmdlineParts): string {
    return firecrackerCmdline([...parts.kernel, ...parts.imp, ...parts.extra]);
  }

  consoleLog(spec: VmSpec): string {
    return this.layoutOf(spec).host.consoleLog;
  }

  /** Where a VM's files go under this driver's configuration. Pure; exported for tests and sweeps. */
  layoutOf(spec: VmSpec): FirecrackerLayout {
    const jailer = this.#options.jailer;
    return jailer === undefined
      ? unjailedLayout(spec)
      : jailedLayout(spec, { chrootBaseDir: jailer.chrootBaseDir, firecrackerBinary: this.#options.firecrackerBinary });
  }

  async start(spec: VmSpec, context: DriverContext, signal?: AbortSignal): Promise<FirecrackerVm> {
    let layout: FirecrackerLayout;
    try {
      assertFirecrackerSpec(spec);
      layout = this.layoutOf(spec);
    } catch (err) {
      throw terminalError("VmSpecInvalid", `Cannot start VM ${spec.name} under Firecracker: ${(err as Error).message}`, { cause: err, context: { vm: spec.name } });
    }
    const api = new FirecrackerApi(layout.host.apiSocket, { vm: spec.name, timeoutMs: this.#options.requestTimeoutMs });
    const restore = spec.memorySnapshot?.role === "restore";
    if (spec.memorySnapshot !== undefined && !this.memorySnapshots) throw terminalError("SnapshotUnsupported", `Cannot start VM ${spec.name} from or for a memory snapshot: this Firecracker runs under the jailer`);
    const state: BootState = { spec, layout, context, api, options: this.#options };
    const boot = await runSteps(restore ? RESTORE_STEPS : BOOT_STEPS, state, {
      logger: context.logger,
      ...(signal === undefined ? {} : { signal }),
      onFailure: (step, err) => context.logger.warn({ vm: spec.name, step, errorClass: classOf(err), error: (err as Error).message }, "firecracker boot step failed"),
    });
    const process = state.process;
    if (process === undefined) throw new Error("boot steps finished without a process");
    context.logger.info({ vm: spec.name, pid: process.pid, jailed: layout.jail !== undefined, restored: restore, timings: boot.timings }, "firecracker started");
    return new FirecrackerVm({ spec, layout, api, process, boot, logger: context.logger, killGraceMs: this.#options.killGraceMs, ...(this.#options.maxConsoleBytes === undefined ? {} : { maxConsoleBytes: this.#options.maxConsoleBytes }) });
  }

  /**
   * Takes over a VM this driver started before the agent restarted, from its still-running
   * Firecracker process (`adoptAllSupervised(spec.dir)`) and the spec of its record (`readVmRecord`).
   * Firecracker's API must answer on its socket with the instance Running. Rejects with a terminal
   * `VmAdoptFailed` otherwise, after stopping what was left and removing its sockets (and jail).
   */
  async adopt(spec: VmSpec, processes: readonly VmmProcess[], context: DriverContext): Promise<FirecrackerVm> {
    let layout: FirecrackerLayout;
    try {
      assertFirecrackerSpec(spec);
      layout = this.layoutOf(spec);
    } catch (err) {
      throw terminalError("VmSpecInvalid", `Cannot adopt VM ${spec.name} under Firecracker: ${(err as Error).message}`, { cause: err, context: { vm: spec.name } });
    }
    const o = this.#options;
    const api = new FirecrackerApi(layout.host.apiSocket, { vm: spec.name, timeoutMs: o.requestTimeoutMs });
    const state: BootState = { spec, layout, context, api, options: o, adopting: processes };
    const adopted = await runSteps(ADOPT_STEPS, state, {
      logger: context.logger,
      onFailure: (step, err) => context.logger.warn({ vm: spec.name, step, errorClass: classOf(err), error: (err as Error).message }, "firecracker adoption failed"),
    });
    const process = mustHave(state.process);
    context.logger.info({ vm: spec.name, pid: process.pid, jailed: layout.jail !== undefined }, "firecracker adopted");
    return new FirecrackerVm({ spec, layout, api, process, boot: adopted, logger: context.logger, killGraceMs: o.killGraceMs, ...(o.maxConsoleBytes === undefined ? {} : { maxConsoleBytes: o.maxConsoleBytes }) });
  }
}

function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
