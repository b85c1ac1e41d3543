/**
 * Builds a NodeAgent from an AgentConfig, as a list of named build steps: the VM host (KVM, image
 * cache, drivers; shared with `imp run`), the setup key, the VM network if configured, the way VMM
 * processes start (under the per-VM supervisor, so they outlive an agent restart), then the agent.
 */
import { arch } from "node:os";
import { readdir, rm, rmdir } from "node:fs/promises";
import { join } from "node:path";
import type { KubeConfig } from "@kubernetes/client-node";
import { describeError, systemClock, terminalError, type Logger } from "../../shared/index.ts";
import { openVmHost, type VmHost } from "../host/index.ts";
import { NodeNetwork } from "../network/index.ts";
import { SnapshotStore } from "../snapshot/index.ts";
import { adoptAllSupervised, memoryMount, SupervisorLauncher, vmMemoryLimitBytes } from "../supervisor/index.ts";
import { DEFAULT_MAX_CONSOLE_BYTES, DirectLauncher, NetnsLauncher, type ProcessLauncher } from "../vmm/index.ts";
import { type VmLaunchPorts, type VmNetworkProvider } from "../vm/index.ts";
import type { AgentConfig } from "./agent-config.ts";
import { loadOrCreateNodeKey } from "./node-key-store.ts";
import { NodeAgent, type NodeAgentOptions } from "./node-agent.ts";
import type { NodeFacts } from "./node-reporter.ts";

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
  /** Tests only: the fault points of the failure-proof suite; `imp agent` reads them from the environment. */
  readonly faults?: NodeAgentOptions["faults"];
}

export async function createNodeAgent(options: CreateNodeAgentOptions): Promise<NodeAgent> {
  const { config, logger } = options;
  if (config.supervised && config.supervisorBinary === undefined) {
    throw terminalError("AgentConfigInvalid", "Cannot start the agent: supervised is on but supervisorBinary is not set");
  }
  const netns = options.netns ?? config.network?.netns;
  const host = await openVmHost({
    stateDir: config.stateDir,
    guestAgent: config.guestAgent,
    accel: config.accel,
    qemu: config.qemu,
    firecracker: config.firecracker,
    imageCacheMaxBytes: config.imageCacheMaxBytes,
    plainHttpRegistries: config.plainHttpRegistries,
    maxConsoleBytes: config.maxConsoleBytes,
    logger,
  });
  const key = await loadOrCreateNodeKey(config.stateDir);
  const snapshots = openSnapshots(config, logger);
  const nodeNetwork = config.network === undefined ? undefined : await openNodeNetwork(config.network, netns, logger);
  return new NodeAgent({
    kubeConfig: options.kubeConfig,
    nodeName: config.nodeName,
    leaseNamespace: config.leaseNamespace,
    key,
    kernels: config.kernels,
    logger,
    healthPort: config.healthPort,
    healthHost: config.healthHost,
    renewIntervalMs: options.renewIntervalMs,
    faults: options.faults,
    facts: nodeFacts(config, host),
    imageCache: () => imageCacheUse(host, config, logger),
    sweep: {
      intervalMs: config.sweepIntervalSeconds * 1000,
      cgroup: config.supervised ? { parent: config.cgroupParent } : undefined,
      sweepNetwork: nodeNetwork === undefined ? undefined : (live) => nodeNetwork.sweep(live),
      sweepSnapshots: snapshots === undefined ? undefined : async () => (await snapshots.sweep()).evicted,
    },
    chooseVmm: (plan) => host.vmmFor(config.vmm === "auto" ? (plan.preferredVmm ?? "auto") : config.vmm),
    releaseNodeWhenIdle: () => releaseNode(config, nodeNetwork),
    // The directory itself is the Pod's hostPath mount point, so its contents go, not it.
    removeNodeState: async () => {
      for (const entry of await readdir(config.stateDir)) await rm(join(config.stateDir, entry), { recursive: true, force: true });
    },
    runtime: {
      stateDir: config.stateDir,
      images: host.images,
      launch: launchPorts(config, host, { netns, dieWithParent: options.dieWithParent ?? false }),
      maxConsoleBytes: config.maxConsoleBytes ?? DEFAULT_MAX_CONSOLE_BYTES,
      network: nodeNetwork === undefined ? undefined : networkProvider(nodeNetwork),
      snapshots: snapshots === undefined ? undefined : { store: snapshots },
    },
  });
}

/** The node's memory snapshots, or none (every VM boots) where the state directory cannot hold them. */
function openSnapshots(config: AgentConfig, logger: Logger): SnapshotStore | undefined {
  try {
    return new SnapshotStore({ root: join(config.stateDir, "snapshots"), maxBytes: config.snapshotCacheMaxBytes, clock: systemClock, logger });
  } catch (err) {
    logger.warn({ error: describeError(err) }, "memory snapshots disabled on this node: VMs of startFrom: Snapshot classes boot");
    return undefined;
  }
}

function nodeFacts(config: AgentConfig, host: VmHost): NodeFacts {
  return {
    arch: arch() === "arm64" ? "arm64" : "amd64",
    kvm: host.kvm.kvm,
    accel: host.kvm.accel,
    kvmReason: host.kvm.reason,
    vmms: [...host.vmms],
    kernels: [...config.kernels.keys()],
    capacity: config.capacity,
    versions: { agent: AGENT_VERSION },
  };
}

async function imageCacheUse(host: VmHost, config: AgentConfig, logger: Logger): Promise<{ images: number; usedBytes: number; limitBytes: number }> {
  const entries = await host.images.cache.list().catch((err: unknown) => {
    logger.warn({ error: describeError(err) }, "cannot list the image cache");
    return [];
  });
  return { images: entries.length, usedBytes: entries.reduce((n, e) => n + e.sizeBytes, 0), limitBytes: config.imageCacheMaxBytes };
}

function openNodeNetwork(n: NonNullable<AgentConfig["network"]>, netns: string | undefined, logger: Logger): Promise<NodeNetwork> {
  return NodeNetwork.open({
    config: { uplink: n.uplink, ...(n.bridge === undefined ? {} : { bridge: n.bridge }), ...(n.subnet === undefined ? {} : { subnet: n.subnet }), ...(n.blockedCIDRs === undefined ? {} : { blockedCidrs: [...n.blockedCIDRs] }), ...(n.allowedCIDRs === undefined ? {} : { allowedCidrs: [...n.allowedCIDRs] }), ...(n.dns === undefined ? {} : { dns: [...n.dns] }) },
    ...(netns === undefined ? {} : { netns }),
    logger,
  });
}

function networkProvider(nn: NodeNetwork): VmNetworkProvider {
  return {
    attach: async (vmId, policy) => {
      const lease = await nn.attach(vmId, { egress: policy.egress, allowedCIDRs: [...policy.allowedCIDRs] });
      return { tap: lease.tap, mac: lease.mac, guest: { ...lease.guest, dns: [...lease.guest.dns] } };
    },
    detach: (vmId) => nn.detach(vmId),
  };
}

/** How this node starts a VM's processes (supervised or direct, in the node's netns) and gives out guest CIDs. */
function launchPorts(config: AgentConfig, host: VmHost, o: { readonly netns: string | undefined; readonly dieWithParent: boolean }): VmLaunchPorts {
  const cids = new Map<string, number>();
  const supervisorBinary = config.supervised ? config.supervisorBinary : undefined;
  return {
    drivers: host.drivers,
    launcherFor: (request, dir, driver) => {
      const launcher: ProcessLauncher =
        supervisorBinary !== undefined
          ? new SupervisorLauncher({ supervisorBinary, vmId: request.id, vmDir: dir.root, cgroup: { parent: config.cgroupParent }, memoryLimitBytes: () => vmMemoryLimitBytes(request.memoryMiB, driver.memoryOverheadMiB) })
          : new DirectLauncher({ dieWithParent: o.dieWithParent });
      return o.netns === undefined ? launcher : new NetnsLauncher(launcher, o.netns);
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
}

/** What the node holds only for VMs (the VM network, this agent's cgroup parent), removed when none is left. */
async function releaseNode(config: AgentConfig, nodeNetwork: NodeNetwork | undefined): Promise<void> {
  await nodeNetwork?.teardown();
  // Only the agent's own level of the parent ("imp/<node>"): "imp" may hold other agents' parents.
  const mount = config.supervised ? await memoryMount("/sys/fs/cgroup") : undefined;
  if (mount !== undefined) await rmdir(join(mount, config.cgroupParent)).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw err;
  });
}
