import type { VmSpec } from "../types.ts";
import { terminalError, type ImpError } from "../../../shared/index.ts";

/**
 * The Firecracker API requests that configure and start one VM, as plain data: a pure function of
 * the VmSpec and of where Firecracker sees its files, so tests can hold every body against the
 * published API description without a running VMM. Only fields that Firecracker v1.12 and v1.16
 * both accept are used.
 */
export interface FirecrackerRequest {
  readonly method: "GET" | "PUT" | "PATCH";
  /** The concrete path, e.g. `/drives/root`. */
  readonly path: string;
  /** The API description's path template, e.g. `/drives/{drive_id}`: the operation the body belongs to. */
  readonly route: string;
  readonly body?: Readonly<Record<string, unknown>>;
}

/** Paths as the Firecracker process sees them: host paths, or paths inside the chroot when jailed. */
export interface FirecrackerPaths {
  readonly kernel: string;
  readonly initrd?: string;
  /** By drive id. */
  readonly drives: ReadonlyMap<string, string>;
  readonly vsockUds: string;
  readonly logFile: string;
  readonly metricsFile: string;
}

export type FirecrackerAction = "InstanceStart" | "SendCtrlAltDel" | "FlushMetrics";

/** The guest's network interface id; the guest sees it as its first virtio-net device. */
export const GUEST_IFACE_ID = "eth0";

// Firecracker's own limits: ids are alphanumeric/underscore up to 64 (drive and iface ids), a tap name
// fits IFNAMSIZ, x86 COMMAND_LINE_SIZE is 2048 with the NUL, and it offers 1..32 vCPUs.
const FC_ID = /^[A-Za-z0-9_]{1,64}$/;
const TAP_NAME = /^[A-Za-z0-9_.-]{1,15}$/;
const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i;
const MAX_CMDLINE_BYTES = 2047;

const invalid = (message: string): ImpError => terminalError("VmSpecInvalid", message);

/** Throws a terminal `VmSpecInvalid` naming the first thing in `spec` that Firecracker would refuse. */
export function assertFirecrackerSpec(spec: VmSpec): void {
  if (!Number.isInteger(spec.vcpus) || spec.vcpus < 1 || spec.vcpus > 32) throw invalid(`Cannot boot ${spec.name} with ${spec.vcpus} vCPUs: Firecracker takes 1..32 (change the VM class)`);
  if (!Number.isInteger(spec.memoryMiB) || spec.memoryMiB < 32) throw invalid(`Cannot boot ${spec.name} with ${spec.memoryMiB} MiB: need an integer ≥ 32 (change the VM class)`);
  if (!Number.isInteger(spec.guestCid) || spec.guestCid < 3 || spec.guestCid > 0xffff_fffe) throw invalid(`Cannot use guest CID ${spec.guestCid}: need 3..4294967294`);
  if (Buffer.byteLength(spec.cmdline) > MAX_CMDLINE_BYTES) throw invalid(`Cannot boot ${spec.name}: kernel command line is ${Buffer.byteLength(spec.cmdline)} bytes, over ${MAX_CMDLINE_BYTES} (shorten the boot arguments)`);
  const ids = new Set<string>();
  for (const drive of spec.drives) {
    if (!FC_ID.test(drive.id) || ids.has(drive.id)) throw invalid(`Cannot attach drive ${JSON.stringify(drive.id)}: ids must be unique and match ${FC_ID}`);
    ids.add(drive.id);
    if ((drive.format ?? "raw") !== "raw" || drive.backing !== undefined) throw invalid(`Cannot attach drive ${drive.id}: Firecracker takes raw files only (no ${drive.format ?? "backing file"})`);
  }
  const roots = spec.drives.filter((d) => d.isRoot).length;
  if (roots !== 1) throw invalid(`Cannot boot ${spec.name}: ${roots} drives are marked root, need exactly one`);
  if (spec.network !== undefined) {
    if (!TAP_NAME.test(spec.network.tap)) throw invalid(`Cannot attach tap ${JSON.stringify(spec.network.tap)}: not a valid interface name`);
    if (!MAC.test(spec.network.mac)) throw invalid(`Cannot give the guest MAC ${JSON.stringify(spec.network.mac)}: need xx:xx:xx:xx:xx:xx`);
  }
}

/**
 * Every pre-boot request, in the order they are sent. The logger and metrics come first so that a
 * refusal of any later request is already in Firecracker's log. The root drive is sent first (Firecracker
 * makes it `/dev/vda` whatever the order; sending it first keeps the log readable).
 */
export function configRequests(spec: VmSpec, paths: FirecrackerPaths): FirecrackerRequest[] {
  assertFirecrackerSpec(spec);
  const requests: FirecrackerRequest[] = [
    put("/logger", "/logger", { log_path: paths.logFile, level: "Info", show_level: true, show_log_origin: false }),
    put("/metrics", "/metrics", { metrics_path: paths.metricsFile }),
    put("/machine-config", "/machine-config", { vcpu_count: spec.vcpus, mem_size_mib: spec.memoryMiB, smt: false }),
    put("/boot-source", "/boot-source", {
      kernel_image_path: paths.kernel,
      boot_args: spec.cmdline,
      ...(paths.initrd === undefined ? {} : { initrd_path: paths.initrd }),
    }),
  ];
  const drives = [...spec.drives].sort((a, b) => Number(b.isRoot) - Number(a.isRoot));
  for (const drive of drives) {
    const hostPath = paths.drives.get(drive.id);
    if (hostPath === undefined) throw invalid(`Cannot attach drive ${drive.id}: no path for it`);
    requests.push(
      put(`/drives/${drive.id}`, "/drives/{drive_id}", {
        drive_id: drive.id,
        path_on_host: hostPath,
        is_root_device: drive.isRoot,
        is_read_only: drive.readOnly,
      }),
    );
  }
  if (spec.network !== undefined) {
    requests.push(
      put(`/network-interfaces/${GUEST_IFACE_ID}`, "/network-interfaces/{iface_id}", {
        iface_id: GUEST_IFACE_ID,
        host_dev_name: spec.network.tap,
        guest_mac: spec.network.mac.toLowerCase(),
      }),
    );
  }
  requests.push(put("/vsock", "/vsock", { guest_cid: spec.guestCid, uds_path: paths.vsockUds }));
  // virtio-rng: the guest can draw fresh host entropy whenever it wants, which matters most after a
  // restore, when every clone starts from the template's pool (Imp's kernel has HW_RANDOM_VIRTIO).
  requests.push(put("/entropy", "/entropy", {}));
  return requests;
}

/**
 * The requests a restored VM's Firecracker gets before its snapshot: only the logger and the metrics
 * may be configured before `PUT /snapshot/load`; the machine, drives, network and vsock come from the
 * snapshot itself.
 */
export function restoreConfigRequests(paths: FirecrackerPaths): FirecrackerRequest[] {
  return [
    put("/logger", "/logger", { log_path: paths.logFile, level: "Info", show_level: true, show_log_origin: false }),
    put("/metrics", "/metrics", { metrics_path: paths.metricsFile }),
  ];
}

/** Pauses the vCPUs: a snapshot is taken of a paused VM only. */
export const PAUSE_VM: FirecrackerRequest = { method: "PATCH", path: "/vm", route: "/vm", body: { state: "Paused" } };

/** A full snapshot of a paused VM: the device state to `statePath`, all of its memory to `memoryFile` (paths as Firecracker sees them). */
export function snapshotCreateRequest(statePath: string, memoryFile: string): FirecrackerRequest {
  return put("/snapshot/create", "/snapshot/create", { snapshot_type: "Full", snapshot_path: statePath, mem_file_path: memoryFile });
}

/**
 * Loads a snapshot into a fresh Firecracker and resumes it. The memory file is mapped privately
 * (Firecracker opens it read-only), so many VMs restore from one file; the tap the snapshot names is
 * replaced by this VM's own. Paths as Firecracker sees them.
 */
export function snapshotLoadRequest(options: { readonly statePath: string; readonly memoryFile: string; readonly tap?: string }): FirecrackerRequest {
  return put("/snapshot/load", "/snapshot/load", {
    snapshot_path: options.statePath,
    mem_backend: { backend_type: "File", backend_path: options.memoryFile },
    resume_vm: true,
    ...(options.tap === undefined ? {} : { network_overrides: [{ iface_id: GUEST_IFACE_ID, host_dev_name: options.tap }] }),
  });
}

export function actionRequest(action: FirecrackerAction): FirecrackerRequest {
  return put("/actions", "/actions", { action_type: action });
}

export const DESCRIBE_INSTANCE: FirecrackerRequest = { method: "GET", path: "/", route: "/" };

function put(path: string, route: string, body: Record<string, unknown>): FirecrackerRequest {
  return { method: "PUT", path, route, body };
}
