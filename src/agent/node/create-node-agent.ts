/**
 * Builds a NodeAgent from an AgentConfig: measures KVM, loads the setup key, opens the image cache,
 * picks the VMM drivers and the way VMM processes are started (under the per-VM supervisor, so they
 * outlive an agent restart), and the VM network if configured.
 */
import { arch } from "node:os";
import { readdir, rm, rmdir } from "node:fs/promises";
import { join } from "node:path";
import type { KubeConfig } from "@kubernetes/client-node";
import { describeError, terminalError, type Logger } from "../../shared/index.ts";
import { fileDigestOf } from "../image/cache/index.ts";
import { NodeNetwork } from "../network/index.ts";
import { adoptAllSupervised, memoryMount, SupervisorLauncher, vmMemoryLimitBytes } from "../supervisor/index.ts";
import { DEFAULT_MAX_CONSOLE_BYTES, DirectLauncher, FirecrackerDriver, NetnsLauncher, probeKvm, QemuDriver, readHostTscKhz, type ProcessLauncher, type VmmDriver, type VmmKind } from "../vmm/index.ts";
import type { VmLaunchPorts, VmNetworkProvider } from "../vm/index.ts";
import type { AgentConfig } from "./agent-config.ts";
import { loadOrCreateNodeKey } from "./node-key-store.ts";
import { NodeAgent } from "./node-agent.ts";
import type { VmPlan } from "./vm-plan.ts";
import { VmImages } from "./vm-images.ts";

export const AGENT_VERSION = "0.1.0";

export interface CreateNodeAgentOptions {
  readonly config: AgentConfig;
  readonly kubeConfig: KubeConfig;
  readonly logger: Logger;
  /** Tests: VMM processes die with the agent (never in production). */
  readonly dieWithParent?: boolean;
  /** Run the VM network, and every VM process with it, inside this named network namespace (tests simulate several nodes on one machine this way). */
  readonly netns?: string;
  readonly renewIntervalMs?: number;
}

export async function createNodeAgent(options: CreateNodeAgentOptions): Promise<NodeAgent> {
  const { config, logger } = options;
  const netns = options.netns ?? config.network?.netns;
  const kvm = await probeKvm({ mode: config.accel, qemuBinary: config.qemu.binary });
  logger.info({ kvm: kvm.kvm, accel: kvm.accel, reason: kvm.reason, ms: kvm.ms }, "kvm probe");
  const key = await loadOrCreateNodeKey(config.stateDir);
  const images = await VmImages.open({
    root: join(config.stateDir, "images"),
    guestAgent: { path: config.guestAgent, digest: await fileDigestOf(config.guestAgent) },
    cacheMaxBytes: config.imageCacheMaxBytes,
    plainHttp: (registry) => config.plainHttpRegistries.includes(registry) || /^(127\.|localhost(:|$)|\[::1\])/.test(registry),
    logger,
  });
  const tscKhz = await readHostTscKhz();
  const drivers = new Map<VmmKind, VmmDriver>();
  const consoleCap = config.maxConsoleBytes === undefined ? {} : { maxConsoleBytes: config.maxConsoleBytes };
  const qemu = new QemuDriver({ qemuBinary: config.qemu.binary, accel: kvm.accel, ...(tscKhz === undefined ? {} : { tscKhz }), ...(config.qemu.vhostDeviceVsock === undefined ? {} : { vhostDeviceVsock: config.qemu.vhostDeviceVsock }), ...consoleCap });
  drivers.set("qemu", qemu);
  if (config.firecracker !== undefined) drivers.set("firecracker", new FirecrackerDriver({ firecrackerBinary: config.firecracker.binary, ...consoleCap }));
  const chooseVmm = (plan: VmPlan): VmmKind => {
    const wanted = config.vmm === "auto" ? (plan.preferredVmm ?? (kvm.kvm && drivers.has("firecracker") ? "firecracker" : "qemu")) : config.vmm;
    // Firecracker needs KVM; without it the VM boots under QEMU rather than not at all.
    if (wanted === "firecracker" && (!kvm.kvm || !drivers.has("firecracker"))) return "qemu";
    return wanted;
  };
  let network: VmNetworkProvider | undefined;
  let nodeNetwork: NodeNetwork | undefined;
  if (config.network !== undefined) {
    const n = config.network;
    nodeNetwork = await NodeNetwork.open({
      config: { uplink: n.uplink, ...(n.bridge === undefined ? {} : { bridge: n.bridge }), ...(n.subnet === undefined ? {} : { subnet: n.subnet }), ...(n.blockedCIDRs === undefined ? {} : { blockedCidrs: [...n.blockedCIDRs] }), ...(n.allowedCIDRs === undefined ? {} : { allowedCidrs: [...n.allowedCIDRs] }), ...(n.dns === undefined ? {} : { dns: [...n.dns] }) },
      ...(netns === undefined ? {} : { netns }),
      logger,
    });
    const nn = nodeNetwork;
    network = {
      attach: async (vmId, policy) => {
        const lease = await nn.attach(vmId, { egress: policy.egress, allowedCIDRs: [...policy.allowedCIDRs] });
        return { tap: lease.tap, mac: lease.mac, guest: { ...lease.guest, dns: [...lease.guest.dns] } };
      },
      detach: (vmId) => nn.detach(vmId),
    };
  }
  if (config.supervised && config.supervisorBinary === undefined) {
    throw terminalError("AgentConfigInvalid", "Cannot start the agent: supervised is on but supervisorBinary is not set");
  }
  const cids = new Map<string, number>();
  const launch: VmLaunchPorts = {
    drivers,
    launcherFor: (request, dir) => {
      const launcher: ProcessLauncher =
        config.supervised && config.supervisorBinary !== undefined
          ? new SupervisorLauncher({ supervisorBinary: config.supervisorBinary, vmId: request.id, vmDir: dir.root, cgroup: { parent: config.cgroupParent }, memoryLimitBytes: () => vmMemoryLimitBytes(request.memoryMiB) })
          : new DirectLauncher({ dieWithParent: options.dieWithParent ?? false });
      return netns === undefined ? launcher : new NetnsLauncher(launcher, netns);
    },
    adoptProcesses: async (dir) => (await adoptAllSupervised(dir.root)).adopted,
    allocateCid: (id) => {
      const existing = cids.get(id);
      if (existing !== undefined) return existing;
      const used = new Set(cids.values());
      let cid = 3;
      while (used.has(cid)) cid++;
      cids.set(id, cid);
      return cid;
    },
    releaseCid: (id) => {
      cids.delete(id);
    },
  };
  const agent = new NodeAgent({
    kubeConfig: options.kubeConfig,
    nodeName: config.nodeName,
    leaseNamespace: config.leaseNamespace,
    key,
    kernels: config.kernels,
    logger,
    healthPort: config.healthPort,
    ...(config.healthHost === undefined ? {} : { healthHost: config.healthHost }),
    ...(options.renewIntervalMs === undefined ? {} : { renewIntervalMs: options.renewIntervalMs }),
    facts: {
      arch: arch() === "arm64" ? "arm64" : "amd64",
      kvm: kvm.kvm,
      accel: kvm.accel,
      kvmReason: kvm.reason,
      vmms: [...drivers.keys()].filter((k) => k === "qemu" || kvm.kvm),
      kernels: [...config.kernels.keys()],
      capacity: config.capacity,
      versions: { agent: AGENT_VERSION },
    },
    imageCache: async () => {
      const entries = await images.cache.list().catch((err: unknown) => {
        logger.warn({ error: describeError(err) }, "cannot list the image cache");
        return [];
      });
      return { images: entries.length, usedBytes: entries.reduce((n, e) => n + e.sizeBytes, 0), limitBytes: config.imageCacheMaxBytes };
    },
    sweep: {
      intervalMs: config.sweepIntervalSeconds * 1000,
      ...(config.supervised ? { cgroup: { parent: config.cgroupParent } } : {}),
      ...(nodeNetwork === undefined ? {} : { sweepNetwork: (live: Pick<ReadonlySet<string>, "has">) => (nodeNetwork as NodeNetwork).sweep(live) }),
    },
    chooseVmm,
    releaseNodeWhenIdle: async () => {
      await nodeNetwork?.teardown();
      // Only the agent's own level of the parent ("imp/<node>"): "imp" may hold other agents' parents.
      const mount = config.supervised ? await memoryMount("/sys/fs/cgroup") : undefined;
      if (mount !== undefined) await rmdir(join(mount, config.cgroupParent)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw err;
      });
    },
    // The directory itself is the Pod's hostPath mount point, so its contents go, not it.
    removeNodeState: async () => {
      for (const entry of await readdir(config.stateDir)) await rm(join(config.stateDir, entry), { recursive: true, force: true });
    },
    runtime: {
      stateDir: config.stateDir,
      images,
      launch,
      maxConsoleBytes: config.maxConsoleBytes ?? DEFAULT_MAX_CONSOLE_BYTES,
      ...(network === undefined ? {} : { network }),
    },
  });
  return agent;
}
