import { basename, isAbsolute, join, relative, sep } from "node:path";
import type { VmSpec } from "../types.ts";
import type { FirecrackerPaths } from "./api-requests.ts";
import { terminalError } from "../../../shared/index.ts";

/**
 * Where one Firecracker VM keeps its files, seen from the host and from the VMM. Unjailed both views
 * are the same host paths in the VM directory. Jailed, Firecracker lives in a chroot
 * `<base>/<exec name>/<jail id>/root` and sees only paths inside it; each resource the spec names is
 * hard-linked in under a fixed name. The log and metrics files are created in the VM directory and
 * linked into the chroot, so they outlive the chroot's removal. The only place that builds these paths.
 */
export interface FirecrackerLayout {
  /** The jail id, also Firecracker's `--id`. */
  readonly id: string;
  /** Host paths. */
  readonly host: {
    readonly apiSocket: string;
    readonly vsockUds: string;
    readonly logFile: string;
    readonly metricsFile: string;
    /** Firecracker's stdout: the guest serial console and its own early messages. */
    readonly consoleLog: string;
    readonly stderrLog: string;
  };
  /** Paths as Firecracker sees them: what the API requests carry. */
  readonly vmm: FirecrackerPaths & { readonly apiSocket: string };
  /** Set when jailed. */
  readonly jail?: JailLayout;
}

export interface JailLayout {
  /** `<base>/<exec name>/<id>`: removed as a whole after the VM. */
  readonly dir: string;
  /** `<dir>/root`, the chroot. */
  readonly root: string;
  /** Host file → name inside the chroot (`/kernel`, `/drive-root`, …), and whether the VMM writes it. */
  readonly links: readonly JailLink[];
}

export interface JailLink {
  readonly hostPath: string;
  /** Absolute path inside the chroot. */
  readonly inside: string;
  /** The jailed user must own it: Firecracker writes it (writable drives, log, metrics). */
  readonly writable: boolean;
}

const SOCKET_NAMES = { api: "fc-api.sock", vsock: "vsock.sock" } as const;
// sun_path is 108 bytes including the NUL.
const MAX_SOCKET_PATH_BYTES = 107;

/** Firecracker and jailer ids: alphanumeric and hyphens, up to 64. Derived from the VM's name. */
export function firecrackerId(name: string): string {
  const id = name.replace(/[^A-Za-z0-9-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 64).replace(/-+$/, "");
  if (id === "") throw terminalError("VmSpecInvalid", `Cannot derive a Firecracker id from VM name ${JSON.stringify(name)}: it needs at least one letter or digit`);
  return id;
}

/**
 * Unjailed, Firecracker sees host paths — except in a VM of a memory snapshot (template or restored),
 * where its drives and vsock socket are named relative to its directory (Firecracker runs there). A
 * snapshot keeps the drive and vsock paths it was taken with (v1.12 cannot override them), so
 * relative names make every restored VM open its own disks and bind its own socket instead of the
 * template's.
 */
export function unjailedLayout(spec: VmSpec): FirecrackerLayout {
  const host = hostFiles(spec.dir);
  assertSocketPaths([host.apiSocket, host.vsockUds]);
  const seen = spec.memorySnapshot === undefined ? (path: string): string => path : (path: string): string => inVmDir(spec.dir, path);
  return {
    id: firecrackerId(spec.name),
    host,
    vmm: {
      apiSocket: host.apiSocket,
      kernel: spec.kernel,
      ...(spec.initrd === undefined ? {} : { initrd: spec.initrd }),
      drives: new Map(spec.drives.map((d) => [d.id, seen(d.path)])),
      vsockUds: seen(host.vsockUds),
      logFile: host.logFile,
      metricsFile: host.metricsFile,
    },
  };
}

export function jailedLayout(spec: VmSpec, options: { readonly chrootBaseDir: string; readonly firecrackerBinary: string }): FirecrackerLayout {
  const id = firecrackerId(spec.name);
  const dir = join(options.chrootBaseDir, basename(options.firecrackerBinary), id);
  const root = join(dir, "root");
  const files = hostFiles(spec.dir);
  const inside = {
    apiSocket: `/${SOCKET_NAMES.api}`,
    vsockUds: `/${SOCKET_NAMES.vsock}`,
    kernel: "/kernel",
    initrd: "/initrd",
    logFile: "/firecracker.log",
    metricsFile: "/firecracker.metrics",
  };
  const links: JailLink[] = [
    { hostPath: spec.kernel, inside: inside.kernel, writable: false },
    ...(spec.initrd === undefined ? [] : [{ hostPath: spec.initrd, inside: inside.initrd, writable: false }]),
    ...spec.drives.map((d) => ({ hostPath: d.path, inside: `/drive-${d.id}`, writable: !d.readOnly })),
    { hostPath: files.logFile, inside: inside.logFile, writable: true },
    { hostPath: files.metricsFile, inside: inside.metricsFile, writable: true },
  ];
  const host = { ...files, apiSocket: join(root, SOCKET_NAMES.api), vsockUds: join(root, SOCKET_NAMES.vsock) };
  assertSocketPaths([host.apiSocket, host.vsockUds]);
  return {
    id,
    host,
    vmm: {
      apiSocket: inside.apiSocket,
      kernel: inside.kernel,
      ...(spec.initrd === undefined ? {} : { initrd: inside.initrd }),
      drives: new Map(spec.drives.map((d) => [d.id, `/drive-${d.id}`])),
      vsockUds: inside.vsockUds,
      logFile: inside.logFile,
      metricsFile: inside.metricsFile,
    },
    jail: { dir, root, links },
  };
}

/**
 * `path` relative to `dir`, Firecracker's working directory, when it lies in `dir` or beside it
 * (`./vsock.sock`, `../scratch.ext4`): a VM's disks sit beside its VMM directory
 * (`<vms>/<id>/scratch.ext4` for `<vms>/<id>/vmm`) and every VM's files are laid out alike, so the
 * same relative path names the template's file in the template and the restored VM's own in the
 * restored VM. Anything further away (a shared file) keeps its absolute path.
 */
function inVmDir(dir: string, path: string): string {
  const rel = relative(dir, path);
  if (rel === "" || isAbsolute(rel)) return path;
  const ups = rel.split(sep).filter((part) => part === "..").length;
  if (ups > 1 || (ups === 1 && !rel.startsWith(`..${sep}`))) return path;
  return ups === 1 ? rel : `./${rel}`;
}

/** Host path of a file inside the chroot. */
export function inJail(jail: JailLayout, inside: string): string {
  return join(jail.root, inside);
}

function hostFiles(dir: string): FirecrackerLayout["host"] {
  return {
    apiSocket: join(dir, SOCKET_NAMES.api),
    vsockUds: join(dir, SOCKET_NAMES.vsock),
    logFile: join(dir, "firecracker.log"),
    metricsFile: join(dir, "firecracker.metrics"),
    consoleLog: join(dir, "console.log"),
    stderrLog: join(dir, "firecracker.stderr"),
  };
}

function assertSocketPaths(paths: readonly string[]): void {
  for (const path of paths) {
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) throw terminalError("VmDirTooLong", `Cannot use socket path ${path}: over ${MAX_SOCKET_PATH_BYTES} bytes (shorten the VM directory, chroot base or VM name)`);
  }
}
