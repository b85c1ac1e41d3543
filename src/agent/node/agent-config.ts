/**
 * The node agent's configuration: what this node offers and where its files and binaries are. Read
 * from a YAML file (`imp agent --config`), with NODE_NAME from the environment (the DaemonSet's
 * downward API). Parsed strictly: an unknown key or a wrong type is an error that names it.
 */
import { readFile } from "node:fs/promises";
import { parse } from "yaml";
import { terminalError } from "../../shared/index.ts";
import type { AccelMode } from "../vmm/kvm-probe.ts";
import type { KernelFiles } from "./vm-plan.ts";

export interface AgentConfig {
  readonly nodeName: string;
  /** Node-local state: VM directories, image store and cache, the setup key. One filesystem. */
  readonly stateDir: string;
  readonly leaseNamespace: string;
  readonly capacity: { readonly vcpu: number; readonly memoryMiB: number; readonly vmSlots: number };
  /** QEMU acceleration: `auto` measures (see kvm-probe.ts), `kvm`/`tcg` force it. */
  readonly accel: AccelMode;
  /** Which VMM boots VMs here: `auto` = Firecracker where KVM is usable and the binary is configured, else QEMU. */
  readonly vmm: "auto" | "qemu" | "firecracker";
  readonly qemu: { readonly binary: string; readonly vhostDeviceVsock?: string };
  readonly firecracker?: { readonly binary: string; readonly jailer?: string };
  readonly kernels: ReadonlyMap<string, KernelFiles>;
  /** The guest agent binary injected into every image (its digest is part of the cache key). */
  readonly guestAgent: string;
  readonly imageCacheMaxBytes: number;
  /** Disk all memory snapshots of template VMs may take (docs/snapshots.md); the least recently used beyond it go. */
  readonly snapshotCacheMaxBytes: number;
  /** Registries spoken to over plain HTTP (loopback registries always are). */
  readonly plainHttpRegistries: readonly string[];
  /** VM network; absent = VMs get no network interface. */
  readonly network?: {
    readonly uplink: string;
    readonly bridge?: string;
    readonly subnet?: string;
    /** Refused to VMs besides the non-public ranges (e.g. public pod or service CIDRs). */
    readonly blockedCIDRs?: readonly string[];
    /** Refused destinations VMs may reach anyway (a registry mirror on the node network); never the always-blocked ones. */
    readonly allowedCIDRs?: readonly string[];
    readonly dns?: readonly string[];
    /** Keep the VM network (bridge, taps, rules) and every VM process inside this named network namespace instead of the agent's. */
    readonly netns?: string;
  };
  /** Health/metrics port; 0 = any; absent = 8081. */
  readonly healthPort: number;
  /** Address of the health/metrics server; absent = 127.0.0.1 (a DaemonSet on the host network gives the node's address or 0.0.0.0, for probes). */
  readonly healthHost?: string;
  /** Run VMMs under the per-VM supervisor (they outlive an agent restart). Default true. */
  readonly supervised: boolean;
  readonly supervisorBinary?: string;
  /** cgroup path (below each controller's mount) that holds this agent's VM cgroups; outside the agent's own. Default "imp/<nodeName>". */
  readonly cgroupParent: string;
  /** Seconds between sweeps of leftovers (processes, cgroups, dirs, taps of VMs no longer bound here). */
  readonly sweepIntervalSeconds: number;
  /**
   * Console bytes a guest may write before its VM is stopped (GuestConsoleFlood): the console log is
   * on the node's disk and no VMM bounds it. Absent = the drivers' default, 16 MiB.
   */
  readonly maxConsoleBytes?: number;
}

const KEYS = new Set(["nodeName", "stateDir", "leaseNamespace", "capacity", "accel", "vmm", "qemu", "firecracker", "kernels", "guestAgent", "imageCacheMaxBytes", "snapshotCacheMaxBytes", "plainHttpRegistries", "network", "healthPort", "healthHost", "supervised", "supervisorBinary", "cgroupParent", "sweepIntervalSeconds", "maxConsoleBytes"]);

export async function loadAgentConfig(path: string, env: NodeJS.ProcessEnv): Promise<AgentConfig> {
  let raw: unknown;
  try {
    raw = parse(await readFile(path, "utf8"));
  } catch (err) {
    throw terminalError("AgentConfigInvalid", `Cannot read agent config ${path}: ${(err as Error).message}`, { cause: err });
  }
  return parseAgentConfig(raw, env, path);
}

export function parseAgentConfig(raw: unknown, env: NodeJS.ProcessEnv, where = "agent config"): AgentConfig {
  const bad = (what: string): never => {
    throw terminalError("AgentConfigInvalid", `Cannot use ${where}: ${what}`);
  };
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return bad("expected a mapping at the top level");
  const o = raw as Record<string, unknown>;
  for (const key of Object.keys(o)) if (!KEYS.has(key)) bad(`unknown key "${key}"`);
  const str = (key: string, fallback?: string): string => {
    const v = o[key] ?? fallback;
    if (typeof v !== "string" || v === "") return bad(`"${key}" must be a non-empty string`);
    return v;
  };
  const atLeast = (v: number, min: number, key: string): number => (v >= min ? v : bad(`"${key}" must be at least ${min}`));
  const int = (v: unknown, key: string): number => (typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : bad(`"${key}" must be a non-negative integer`));
  const nodeName = typeof o["nodeName"] === "string" ? o["nodeName"] : env["NODE_NAME"];
  if (nodeName === undefined || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(nodeName)) bad(`the node name (nodeName or $NODE_NAME) must be a DNS subdomain, got ${JSON.stringify(nodeName)}`);
  const capacity = (o["capacity"] ?? {}) as Record<string, unknown>;
  const kernelsRaw = o["kernels"];
  if (typeof kernelsRaw !== "object" || kernelsRaw === null) bad(`"kernels" must map kernel names to {kernel, initrd?, args?}`);
  const kernels = new Map<string, KernelFiles>();
  for (const [name, k] of Object.entries(kernelsRaw as Record<string, unknown>)) {
    const kk = k as Record<string, unknown>;
    if (typeof kk["kernel"] !== "string") bad(`kernels.${name}.kernel must be a path`);
    const args = kk["args"] ?? [];
    if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) bad(`kernels.${name}.args must be a list of strings`);
    kernels.set(name, { kernel: kk["kernel"] as string, ...(typeof kk["initrd"] === "string" ? { initrd: kk["initrd"] } : {}), args: args as string[] });
  }
  const qemu = (o["qemu"] ?? {}) as Record<string, unknown>;
  const fc = o["firecracker"] as Record<string, unknown> | undefined;
  const accel = o["accel"] ?? "auto";
  if (accel !== "auto" && accel !== "kvm" && accel !== "tcg") bad(`"accel" must be auto, kvm or tcg`);
  const vmm = o["vmm"] ?? "auto";
  if (vmm !== "auto" && vmm !== "qemu" && vmm !== "firecracker") bad(`"vmm" must be auto, qemu or firecracker`);
  const network = o["network"] as AgentConfig["network"] | undefined;
  if (network !== undefined && typeof network.uplink !== "string") bad(`network.uplink must name the interface VM traffic leaves by`);
  if (network?.netns !== undefined && (typeof network.netns !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(network.netns))) bad(`network.netns must name a network namespace (as in /run/netns)`);
  return {
    nodeName: nodeName as string,
    stateDir: str("stateDir", "/var/lib/imp"),
    leaseNamespace: str("leaseNamespace", "imp-system"),
    capacity: { vcpu: int(capacity["vcpu"] ?? 8, "capacity.vcpu"), memoryMiB: int(capacity["memoryMiB"] ?? 16384, "capacity.memoryMiB"), vmSlots: int(capacity["vmSlots"] ?? 8, "capacity.vmSlots") },
    accel: accel as AccelMode,
    vmm: vmm as AgentConfig["vmm"],
    qemu: { binary: typeof qemu["binary"] === "string" ? qemu["binary"] : "qemu-system-x86_64", ...(typeof qemu["vhostDeviceVsock"] === "string" ? { vhostDeviceVsock: qemu["vhostDeviceVsock"] } : {}) },
    ...(fc === undefined ? {} : { firecracker: { binary: String(fc["binary"]), ...(typeof fc["jailer"] === "string" ? { jailer: fc["jailer"] } : {}) } }),
    kernels,
    guestAgent: str("guestAgent"),
    imageCacheMaxBytes: int(o["imageCacheMaxBytes"] ?? 20 * 1024 ** 3, "imageCacheMaxBytes"),
    snapshotCacheMaxBytes: int(o["snapshotCacheMaxBytes"] ?? 16 * 1024 ** 3, "snapshotCacheMaxBytes"),
    plainHttpRegistries: Array.isArray(o["plainHttpRegistries"]) ? (o["plainHttpRegistries"] as string[]) : [],
    ...(network === undefined ? {} : { network }),
    healthPort: int(o["healthPort"] ?? 8081, "healthPort"),
    ...(o["healthHost"] === undefined ? {} : { healthHost: str("healthHost") }),
    supervised: o["supervised"] !== false,
    ...(typeof o["supervisorBinary"] === "string" ? { supervisorBinary: o["supervisorBinary"] } : {}),
    // Per node: the sweep treats every VM cgroup under its parent that maps to no VM of its own as a
    // leftover, so two agents on one machine (tests, demos) must never share a parent.
    cgroupParent: str("cgroupParent", `imp/${nodeName as string}`),
    sweepIntervalSeconds: int(o["sweepIntervalSeconds"] ?? 60, "sweepIntervalSeconds"),
    ...(o["maxConsoleBytes"] === undefined ? {} : { maxConsoleBytes: atLeast(int(o["maxConsoleBytes"], "maxConsoleBytes"), 64 * 1024, "maxConsoleBytes") }),
  };
}
