import { terminalError } from "../../../shared/index.ts";
import type { Accel } from "../kvm-probe.ts";
import { vmmVersion } from "../vmm-version.ts";
import type { DriverContext, KernelCmdlineParts, VmDrive, VmmDriver, VmmProcess, VmSpec } from "../types.ts";
import type { QemuDrive } from "./argv.ts";
import { QemuVmDir } from "./layout.ts";
import type { QemuChannelKind, QemuVmOptions } from "./steps.ts";
import { QemuVm } from "./vm.ts";


/**
 * QEMU's memory beyond guest RAM, measured on busybox and a JIT-like workload that rewrites 1 MiB of
 * code in a loop (docs/workloads.md): 24 MiB of file pages, 35–40 MiB of its own, and under TCG the
 * translated-code buffer, bounded by TCG_TB_SIZE_MIB, plus its bookkeeping: 205 MiB at the worst.
 */
export const QEMU_TCG_MEMORY_OVERHEAD_MIB = 256;
/** With KVM the guest's code runs natively: no code buffer; the earlier roomy default stays. */
export const QEMU_KVM_MEMORY_OVERHEAD_MIB = 128;

export interface QemuDriverOptions {
  readonly qemuBinary?: string;
  /** rust-vmm vhost-device-vsock. Given: the guest channel is hybrid vsock; absent: virtio-serial. */
  readonly vhostDeviceVsock?: string | undefined;
  /** Default "tcg"; a node sets it from `probeKvm().accel`. */
  readonly accel?: Accel;
  /** Host TSC rate (`readHostTscKhz()`), passed as `tsc_early_khz=` under TCG, where calibration can hang. */
  readonly tscKhz?: number | undefined;
  readonly serialPortName?: string;
  readonly backendReadyTimeoutMs?: number;
  /** Console bytes a guest may write before its VM is marked down with `GuestConsoleFlood` (default 16 MiB). */
  readonly maxConsoleBytes?: number | undefined;
}

/**
 * The {@link VmmDriver} for QEMU `-M microvm`. It maps a {@link VmSpec} onto {@link QemuVm}, whose
 * boot is a list of named steps (binaries, directory, vsock backend, QEMU, console) run through the
 * context's launcher, so the same VM runs as a direct child or under a supervisor.
 */
export class QemuDriver implements VmmDriver {
  readonly kind = "qemu" as const;
  /** QEMU exits when the guest powers off. */
  readonly shutdownMode = "poweroff" as const;
  /** Measured (docs/workloads.md): TCG 205 MiB at worst with a 128 MiB code buffer; with KVM there is none. */
  readonly memoryOverheadMiB: number;
  readonly #options: QemuDriverOptions;

  constructor(options: QemuDriverOptions = {}) {
    this.#options = options;
    this.#version = vmmVersion("QEMU", options.qemuBinary ?? "qemu-system-x86_64");
    this.memoryOverheadMiB = (options.accel ?? "tcg") === "tcg" ? QEMU_TCG_MEMORY_OVERHEAD_MIB : QEMU_KVM_MEMORY_OVERHEAD_MIB;
  }

  /** Templates and restored VMs: their RAM in a file, their state saved and loaded over QMP. */
  readonly memorySnapshots = true;
  readonly #version: () => Promise<string>;

  /** `qemu --version`'s first line and the accelerator. */
  async snapshotIdentity(): Promise<string> {
    return `qemu ${await this.#version()} ${this.#options.accel ?? "tcg"}`;
  }

  /** The guest channel VMs of this driver get (but snapshots': see #vmOptions). */
  get channel(): Exclude<QemuChannelKind, "none"> {
    return this.#options.vhostDeviceVsock === undefined ? "serial" : "vsock";
  }

  get guestChannel(): Exclude<QemuChannelKind, "none"> {
    return this.channel;
  }

  /** `panic=-1`: a guest kernel panic reboots at once, which ends QEMU (`-no-reboot`) instead of hanging. */
  cmdline(parts: KernelCmdlineParts): string {
    return [...parts.kernel, "panic=-1", ...parts.imp, ...parts.extra].join(" ");
  }

  consoleLog(spec: VmSpec): string {
    return new QemuVmDir(spec.dir).serialLog();
  }

  async start(spec: VmSpec, context: DriverContext, signal?: AbortSignal): Promise<QemuVm> {
    return QemuVm.start({ ...this.#vmOptions(spec, context), ...(signal === undefined ? {} : { signal }) });
  }

  /**
   * Takes over a VM this driver started before the agent restarted, from its still-running processes
   * (`adoptAllSupervised(spec.dir)`). The spec comes from the VM's record (`readVmRecord`); this
   * driver must be configured as it was at start (same guest channel). Rejects with a terminal
   * `VmAdoptFailed` when QEMU or its vsock backend is gone, after stopping what was left.
   */
  async adopt(spec: VmSpec, processes: readonly VmmProcess[], context: DriverContext): Promise<QemuVm> {
    return QemuVm.adopt({ ...this.#vmOptions(spec, context), processes });
  }

  #vmOptions(spec: VmSpec, context: DriverContext): QemuVmOptions {
    const o = this.#options;
    const accel = o.accel ?? "tcg";
    const snapshot = spec.memorySnapshot;
    return {
      dir: spec.dir,
      // vhost-user-vsock needs RAM shared with its backend and cannot be saved: snapshots use virtio-serial.
      channel: snapshot === undefined ? this.channel : "serial",
      ...(snapshot === undefined ? {} : { snapshot }),
      spec,
      guestCid: spec.guestCid,
      launcher: context.launcher,
      logger: context.logger,
      clock: context.clock,
      machine: {
        kernel: spec.kernel,
        ...(spec.initrd === undefined ? {} : { initrd: spec.initrd }),
        cmdline: cmdlineArgs(spec.cmdline),
        memoryMiB: spec.memoryMiB,
        vcpus: spec.vcpus,
        drives: orderedDrives(spec.drives),
        accel,
        ...(accel === "tcg" && o.tscKhz !== undefined ? { tscKhz: o.tscKhz } : {}),
        ...(spec.network === undefined ? {} : { tap: { tap: spec.network.tap, mac: spec.network.mac } }),
      },
      ...(o.qemuBinary === undefined ? {} : { qemuBinary: o.qemuBinary }),
      ...(o.vhostDeviceVsock === undefined ? {} : { vhostDeviceVsock: o.vhostDeviceVsock }),
      ...(o.serialPortName === undefined ? {} : { serialPortName: o.serialPortName }),
      ...(o.backendReadyTimeoutMs === undefined ? {} : { backendReadyTimeoutMs: o.backendReadyTimeoutMs }),
      ...(o.maxConsoleBytes === undefined ? {} : { maxConsoleBytes: o.maxConsoleBytes }),
    };
  }
}

/**
 * QEMU attaches drives in argv order and the guest names them vda, vdb, … in that order, so the root
 * goes first and the others keep their given order. Exactly one drive must be root.
 */
export function orderedDrives(drives: readonly VmDrive[]): QemuDrive[] {
  const roots = drives.filter((d) => d.isRoot);
  if (roots.length !== 1) throw terminalError("VmSpecInvalid", `Cannot attach drives: ${roots.length} are marked root, need exactly 1`);
  return [...roots, ...drives.filter((d) => !d.isRoot)].map((d) => ({ id: d.id, path: d.path, readOnly: d.readOnly, ...(d.format === undefined ? {} : { format: d.format }), ...(d.backing === undefined ? {} : { backing: d.backing }) }));
}

/** The command line's arguments. Quoted arguments with spaces are not supported (kernelCmdline rejects them). */
export function cmdlineArgs(cmdline: string): string[] {
  return cmdline.split(/[ \t]+/).filter((a) => a !== "");
}
