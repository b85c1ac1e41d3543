/**
 * Pure construction of a QEMU `-M microvm` command line for Imp's test and dev VMs. No I/O here: the
 * driver (vm.ts) decides paths and spawns; this file only turns a validated description into argv.
 * Measured commands and their traps are in docs/boot-kit.md.
 */
import { terminalError } from "../../../shared/index.ts";

/** How the host reaches the guest agent. */
export type QemuGuestChannel =
  /**
   * `vhost-user-vsock-device` backed by rust-vmm's vhost-device-vsock, whose host side is exactly
   * Firecracker's hybrid vsock (a Unix socket speaking `CONNECT <port>`/`OK <n>`). QEMU connects to
   * the backend's control socket; guest memory must be a shared memfd so the backend can map it.
   */
  | { readonly kind: "vsock"; readonly vhostUserSocket: string }
  /** virtio-serial port named `portName`, exposed by QEMU as a listening Unix socket at `socketPath`. */
  | { readonly kind: "serial"; readonly socketPath: string; readonly portName: string };

export interface QemuDrive {
  /** QEMU id; also orders the devices: the first drive is /dev/vda in the guest. */
  readonly id: string;
  readonly path: string;
  /** Attach read-only at the device level too (the guest then cannot write even if it tries). */
  readonly readOnly?: boolean;
  /** Default raw; qcow2 for Imp's own copy-on-write clones (VmDrive.format). */
  readonly format?: "raw" | "qcow2";
  /** A qcow2 drive's raw backing file (VmDrive.backing); required with qcow2. */
  readonly backing?: string;
}

export interface QemuMachineSpec {
  readonly kernel: string;
  readonly initrd?: string;
  /** Kernel command line arguments, one per element (no whitespace inside an element). */
  readonly cmdline: readonly string[];
  readonly memoryMiB: number;
  readonly vcpus: number;
  readonly drives: readonly QemuDrive[];
  readonly channel?: QemuGuestChannel;
  /** `tcg` everywhere; `kvm` where /dev/kvm exists. */
  readonly accel: "tcg" | "kvm";
  /**
   * Host TSC frequency. Under TCG, microvm guests without `tsc_early_khz=` hang at TSC calibration
   * about one boot in seven, so the builder adds it whenever this is set.
   */
  readonly tscKhz?: number;
  /** User-mode network on virtio-net (guest reaches the host at 10.0.2.2). */
  readonly userNetwork?: boolean;
  /** A host tap device (which must exist before QEMU starts) on virtio-net, with the guest's MAC. */
  readonly tap?: { readonly tap: string; readonly mac: string };
  /**
   * Guest RAM in a file instead of anonymous memory, for memory snapshots (memory-snapshot.ts): a
   * template writes through to it (`share`), a VM restored from it maps it privately, copy-on-write.
   * Not with the vsock channel: vhost-user needs RAM shared with its backend, which a private
   * mapping is not (and vhost-user-vsock cannot migrate).
   */
  readonly memoryFile?: { readonly path: string; readonly share: boolean };
  /** QEMU's monitor (QMP) on a listening Unix socket at this path. */
  readonly qmpSocket?: string;
  /** Start paused, waiting for a device state to load over QMP (`-incoming defer`). */
  readonly incoming?: boolean;
  /**
   * The file QEMU appends the serial console to. A file, not QEMU's stdout: a supervised VMM outlives
   * the agent, so nobody may have to keep reading a pipe for the guest to make progress.
   */
  readonly consoleLog: string;
}

const invalid = (message: string): Error => terminalError("VmSpecInvalid", message);

/**
 * TCG's translated-code buffer, in MiB. QEMU 7.2's default is 1 GiB, and it stays resident once
 * filled: a job that generates code (a JIT, a compiler) grew QEMU to 1.2 GiB beyond guest RAM and
 * past its cgroup limit, and the VM was OOM-killed. 128 MiB: boot alone fills ~60 MiB, and no
 * slowdown was measurable against the default (docs/workloads.md).
 */
export const TCG_TB_SIZE_MIB = 128;

const SAFE_ID = /^[A-Za-z][A-Za-z0-9_-]{0,31}$/;
const SAFE_CMDLINE_ARG = /^[\x21-\x7e]+$/;
/** Linux interface names: at most 15 bytes (IFNAMSIZ 16 with the NUL), no separators QEMU would parse. */
const SAFE_IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;
const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;

/** QEMU option values are comma-separated; a literal comma inside a value is written twice. */
export function qemuEscape(value: string): string {
  return value.replaceAll(",", ",,");
}

/** The kernel command line as one string, with `tsc_early_khz=` added when known. Throws on unsafe args. */
export function kernelCmdline(spec: Pick<QemuMachineSpec, "cmdline" | "tscKhz">): string {
  const args = [...spec.cmdline];
  if (spec.tscKhz !== undefined && !args.some((a) => a.startsWith("tsc_early_khz="))) {
    if (!Number.isInteger(spec.tscKhz) || spec.tscKhz <= 0) throw invalid(`Cannot use TSC frequency ${spec.tscKhz} kHz: not a positive integer`);
    args.push(`tsc_early_khz=${spec.tscKhz}`);
  }
  for (const arg of args) {
    if (!SAFE_CMDLINE_ARG.test(arg)) throw invalid(`Cannot put ${JSON.stringify(arg)} on the kernel command line: only printable ASCII without spaces`);
  }
  const line = args.join(" ");
  // x86 COMMAND_LINE_SIZE is 2048 including the NUL.
  if (line.length > 2047) throw invalid(`Cannot boot: kernel command line is ${line.length} bytes, over 2047`);
  return line;
}

/**
 * argv (without the binary) for `qemu-system-x86_64`. The serial console is appended to
 * `consoleLog`; there is no monitor, no default devices and no reboot: a guest reboot or kernel panic
 * (with `panic=-1`) makes QEMU exit, and `poweroff` exits with status 0. Rejects an invalid
 * description with a terminal `VmSpecInvalid`.
 */
export function buildQemuArgv(spec: QemuMachineSpec): string[] {
  if (!Number.isInteger(spec.memoryMiB) || spec.memoryMiB < 64) throw invalid(`Cannot boot with ${spec.memoryMiB} MiB: need an integer ≥ 64`);
  if (!Number.isInteger(spec.vcpus) || spec.vcpus < 1 || spec.vcpus > 64) throw invalid(`Cannot boot with ${spec.vcpus} vCPUs: need 1..64`);
  const ids = new Set<string>();
  for (const drive of spec.drives) {
    if (!SAFE_ID.test(drive.id) || ids.has(drive.id)) throw invalid(`Cannot attach drive ${JSON.stringify(drive.id)}: id must be unique and match ${SAFE_ID}`);
    ids.add(drive.id);
    if (drive.format !== undefined && drive.format !== "raw" && drive.format !== "qcow2") throw invalid(`Cannot attach drive ${drive.id}: format ${JSON.stringify(drive.format)} is neither raw nor qcow2`);
    if ((drive.format === "qcow2") !== (drive.backing !== undefined)) throw invalid(`Cannot attach drive ${drive.id}: a qcow2 drive names its raw backing file, and only a qcow2 drive has one`);
  }
  if (spec.tap !== undefined) {
    if (!SAFE_IFNAME.test(spec.tap.tap)) throw invalid(`Cannot attach tap device ${JSON.stringify(spec.tap.tap)}: not an interface name (1-15 of A-Z a-z 0-9 _ . -)`);
    if (!MAC.test(spec.tap.mac)) throw invalid(`Cannot give the guest MAC ${JSON.stringify(spec.tap.mac)}: not xx:xx:xx:xx:xx:xx`);
  }

  const vsock = spec.channel?.kind === "vsock";
  if (vsock && spec.memoryFile !== undefined) {
    throw invalid("Cannot give a vsock VM its RAM in a file: vhost-user-vsock needs RAM shared with its backend and cannot be saved or restored; use the serial channel");
  }
  const memoryBackend = vsock || spec.memoryFile !== undefined;
  const argv: string[] = [
    "-M", memoryBackend ? "microvm,memory-backend=mem" : "microvm",
    "-accel", spec.accel === "tcg" ? `tcg,tb-size=${TCG_TB_SIZE_MIB}` : spec.accel,
    "-cpu", spec.accel === "kvm" ? "host" : "max",
    "-m", `${spec.memoryMiB}M`,
    "-smp", String(spec.vcpus),
    "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
    "-chardev", `file,id=con0,path=${qemuEscape(spec.consoleLog)},append=on`,
    "-serial", "chardev:con0",
    "-kernel", spec.kernel,
  ];
  if (spec.initrd !== undefined) argv.push("-initrd", spec.initrd);
  argv.push("-append", kernelCmdline(spec));
  if (vsock) argv.push("-object", `memory-backend-memfd,id=mem,size=${spec.memoryMiB}M,share=on`);
  if (spec.memoryFile !== undefined) {
    argv.push("-object", `memory-backend-file,id=mem,size=${spec.memoryMiB}M,mem-path=${qemuEscape(spec.memoryFile.path)},share=${spec.memoryFile.share ? "on" : "off"}`);
  }
  for (const drive of spec.drives) {
    const ro = drive.readOnly === true ? ",readonly=on" : "";
    // The backing file and its format come from here, not from the qcow2 header.
    const backing = drive.backing === undefined ? "" : `,backing.driver=raw,backing.file.filename=${qemuEscape(drive.backing)}`;
    argv.push(
      "-drive", `file=${qemuEscape(drive.path)},if=none,id=${drive.id},format=${drive.format ?? "raw"}${backing}${ro}`,
      "-device", `virtio-blk-device,drive=${drive.id}`,
    );
  }
  const channel = spec.channel;
  if (channel?.kind === "vsock") {
    argv.push("-chardev", `socket,id=vsock0,path=${qemuEscape(channel.vhostUserSocket)}`, "-device", "vhost-user-vsock-device,chardev=vsock0");
  } else if (channel?.kind === "serial") {
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(channel.portName)) throw invalid(`Cannot name virtio-serial port ${JSON.stringify(channel.portName)}`);
    argv.push(
      "-chardev", `socket,id=agent0,path=${qemuEscape(channel.socketPath)},server=on,wait=off`,
      "-device", "virtio-serial-device",
      "-device", `virtserialport,name=${channel.portName},chardev=agent0`,
    );
  }
  if (spec.qmpSocket !== undefined) argv.push("-qmp", `unix:${qemuEscape(spec.qmpSocket)},server=on,wait=off`);
  if (spec.incoming === true) argv.push("-incoming", "defer");
  if (spec.userNetwork === true) argv.push("-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0");
  if (spec.tap !== undefined) {
    // script=no/downscript=no: the agent creates and configures the tap; QEMU only opens it.
    argv.push("-netdev", `tap,id=n0,ifname=${spec.tap.tap},script=no,downscript=no`, "-device", `virtio-net-device,netdev=n0,mac=${spec.tap.mac.toLowerCase()}`);
  }
  return argv;
}
