import { access } from "node:fs/promises";
import { runSteps, silentLogger, terminalError, type Logger, type Step } from "../../shared/index.ts";
import { AddressAllocator, macFor, type GuestAddress } from "./allocator.ts";
import { commandRunner, type NetCommandRunner } from "./commands.ts";
import { gatewayAddress, resolveNetworkConfig, type NodeNetworkConfig, type ResolvedNetworkConfig } from "./config.ts";
import { formatIpv4Cidr, minimalCover, parseIpv4CidrMasked } from "./ipv4.ts";
import { parseLinks, planSweep, vmPorts, type ObservedLink } from "./links.ts";
import { nodeNetworksOf } from "./node-networks.ts";
import { renderRuleset, renderTeardown } from "./ruleset.ts";
import { assertVmId, tapAlias, tapNameFor, type EgressMode } from "./tap-name.ts";

/**
 * What a VM's port is. `tap` is what a VMM opens (production, e2e). `veth` stands in for a VM in
 * tests that have no VMM: the host end takes the tap's place on the bridge (same name, same rules),
 * and the caller moves the peer into a network namespace that plays the guest.
 */
export type PortKind = "tap" | "veth";

export interface NodeNetworkOptions {
  readonly config: Partial<NodeNetworkConfig> & Pick<NodeNetworkConfig, "uplink">;
  /** Run everything inside this named network namespace (`ip netns`); tests never touch the host's network. */
  readonly netns?: string;
  /** Bound of every single command; default 10 s. */
  readonly commandTimeoutMs?: number;
  readonly portKind?: PortKind;
  readonly logger?: Logger;
  /** Replaces the command runner (the netns and timeout options then do not apply). */
  readonly runner?: NetCommandRunner;
}

export interface AttachOptions {
  /**
   * Who may open the tap besides root: a VMM running unprivileged (Firecracker under its jailer)
   * can open a persistent tap only if it owns it. Taps only; applies when the tap is created.
   */
  readonly tapOwner?: { readonly uid: number; readonly gid: number };
}

/** What a VM may reach beyond the always-blocked ranges (the ImpVMTemplate's `network`). */
export interface EgressPolicy {
  readonly egress: EgressMode;
  /** `restricted` only. IPv6 blocks have no effect: VMs get no IPv6 at all. Host bits are cleared. */
  readonly allowedCIDRs: readonly string[];
}

export const INTERNET_EGRESS: EgressPolicy = { egress: "internet", allowedCIDRs: [] };

/** The guest protocol's `configure.network` (docs/guest-protocol.md). */
export interface GuestNetwork {
  readonly interface: string;
  readonly address: string;
  readonly gateway: string;
  readonly dns: readonly string[];
}

/** One VM's network: what the VMM needs (tap, MAC) and what the guest's `configure` needs (`guest`). */
export interface NodeNetworkLease extends GuestAddress {
  readonly tap: string;
  readonly dns: readonly string[];
  readonly egress: EgressMode;
  /** The restricted VM's allowed IPv4 blocks, canonical and without overlaps; empty otherwise. */
  readonly allowed: readonly string[];
  readonly guest: GuestNetwork;
  /** veth ports only: the peer the caller moves into its guest namespace. */
  readonly peer?: string;
}

/** The policy in the form the ruleset takes. Pure; throws NetworkEgressInvalid. */
export function normalizeEgress(policy: EgressPolicy): { readonly egress: EgressMode; readonly allowed: readonly string[] } {
  if (!["none", "internet", "restricted"].includes(policy.egress)) {
    throw terminalError("NetworkEgressInvalid", `Cannot apply egress ${JSON.stringify(policy.egress)}: not none, internet or restricted`);
  }
  if (policy.egress !== "restricted") return { egress: policy.egress, allowed: [] };
  try {
    const v4 = policy.allowedCIDRs.filter((c) => !c.includes(":")).map(parseIpv4CidrMasked);
    return { egress: "restricted", allowed: minimalCover(v4).map(formatIpv4Cidr) };
  } catch (cause) {
    throw terminalError("NetworkEgressInvalid", `Cannot apply restricted egress: ${(cause as Error).message}`, { cause });
  }
}

/**
 * The node's VM network: one bridge with the gateway address, a port per VM with bridge port
 * isolation, and one nftables ruleset (tables `inet <table>` and `bridge <table>`) that keeps VMs
 * away from the node, the cluster, metadata services and each other while NAT lets them out through
 * the uplink (docs/network.md). Every operation is idempotent and serialised; every command is
 * bounded. State lives on the node (the ports' aliases), so a new manager adopts what an old one made.
 */
export class NodeNetwork {
  readonly resolved: ResolvedNetworkConfig;
  readonly #runner: NetCommandRunner;
  readonly #logger: Logger;
  readonly #portKind: PortKind;
  readonly #allocator: AddressAllocator;
  readonly #leases = new Map<string, NodeNetworkLease>();
  #queue: Promise<unknown> = Promise.resolve();

  private constructor(resolved: ResolvedNetworkConfig, runner: NetCommandRunner, portKind: PortKind, logger: Logger) {
    this.resolved = resolved;
    this.#runner = runner;
    this.#portKind = portKind;
    this.#logger = logger;
    this.#allocator = new AddressAllocator(resolved.subnet);
  }

  get config(): NodeNetworkConfig {
    return this.resolved.config;
  }

  /**
   * Brings up the node's side (bridge, gateway, forwarding, ruleset) and adopts the VM ports an
   * earlier manager left (their aliases carry VM id and address). On failure nothing it created stays.
   */
  static async open(options: NodeNetworkOptions): Promise<NodeNetwork> {
    const resolved = resolveNetworkConfig(options.config);
    if (options.netns !== undefined && options.runner === undefined) {
      await access(`/run/netns/${options.netns}`).catch((cause: unknown) => {
        throw terminalError("NetworkNamespaceMissing", `Cannot manage the VM network in namespace ${options.netns}: /run/netns/${options.netns} does not exist`, { cause });
      });
    }
    const runner = options.runner ?? commandRunner({ timeoutMs: options.commandTimeoutMs ?? 10_000, ...(options.netns === undefined ? {} : { netns: options.netns }) });
    const network = new NodeNetwork(resolved, runner, options.portKind ?? "tap", options.logger ?? silentLogger);
    await network.#serial(() => network.#openNode());
    return network;
  }

  /**
   * The VM's network, created if missing. Repeating it returns the same lease; with another policy,
   * the same lease under the new policy (and a manager that adopted the port learns it this way).
   */
  async attach(vmId: string, policy: EgressPolicy = INTERNET_EGRESS, options: AttachOptions = {}): Promise<NodeNetworkLease> {
    assertVmId(vmId);
    const egress = normalizeEgress(policy);
    const owner = options.tapOwner;
    if (owner !== undefined && ![owner.uid, owner.gid].every((id) => Number.isInteger(id) && id >= 0 && id < 2 ** 32 - 1)) {
      throw terminalError("NetworkTapOwnerInvalid", `Cannot attach VM ${vmId}: tap owner ${owner.uid}:${owner.gid} is not a uid:gid pair`);
    }
    return this.#serial(() => this.#attach(vmId, egress, owner));
  }

  /** Removes the VM's port and rules and frees its address; other VMs are untouched. Idempotent. */
  detach(vmId: string): Promise<void> {
    return this.#serial(async () => {
      const lease = this.#leases.get(vmId);
      const tap = lease?.tap ?? tapNameFor(this.config.tapPrefix, vmId);
      await this.#deleteLink(tap);
      this.#leases.delete(vmId);
      this.#allocator.release(vmId);
      await this.#applyRuleset();
      this.#logger.info({ vmId, tap }, "vm network detached");
    });
  }

  /**
   * Removes the ports of VMs not in `live` (and ports whose owner cannot be read). Returns the removed
   * ports' names. `live` is asked at decision time, never copied: the agent's sweep passes a set whose
   * membership is the live set at the moment of asking (a VM that attached while the sweep listed the
   * links is live by then), and a copy of such a set is empty: every tap would go.
   */
  sweep(live: Iterable<string> | Pick<ReadonlySet<string>, "has">): Promise<string[]> {
    const liveSet: Pick<ReadonlySet<string>, "has"> = "has" in live ? live : new Set(live);
    return this.#serial(async () => {
      const doomed = planSweep(vmPorts(await this.#observe(), this.config.tapPrefix), liveSet);
      for (const port of doomed) {
        await this.#deleteLink(port.name);
        if (port.owner !== undefined) {
          this.#leases.delete(port.owner.vmId);
          this.#allocator.release(port.owner.vmId);
        }
      }
      // Addresses of VMs that are not live go too, with or without a port (an attach that failed half-way).
      for (const { vmId } of this.#allocator.inUse()) {
        if (!liveSet.has(vmId)) {
          this.#leases.delete(vmId);
          this.#allocator.release(vmId);
        }
      }
      await this.#applyRuleset();
      return doomed.map((p) => p.name);
    });
  }

  /** Removes everything the manager owns on the node: every VM port, the bridge and both tables. Idempotent. */
  teardown(): Promise<void> {
    return this.#serial(async () => {
      for (const port of vmPorts(await this.#observe(), this.config.tapPrefix)) await this.#deleteLink(port.name);
      await this.#deleteLink(this.config.bridge);
      await this.#runner.run(["nft", "-f", "-"], { input: renderTeardown(this.config.table) });
      for (const { vmId } of this.#allocator.inUse()) this.#allocator.release(vmId);
      this.#leases.clear();
      this.#logger.info({ bridge: this.config.bridge }, "node network torn down");
    });
  }

  leases(): NodeNetworkLease[] {
    return [...this.#leases.values()];
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn, fn);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #openNode(): Promise<void> {
    const { bridge } = this.config;
    const gateway = `${gatewayAddress(this.resolved)}/${this.resolved.subnet.prefix}`;
    const run = (argv: string[]): Promise<unknown> => this.#runner.run(argv);
    const links = await this.#observe();
    const steps: Step<undefined>[] = [
      {
        name: "bridge",
        run: async (_s, ctx) => {
          const existing = links.find((l) => l.name === bridge);
          if (existing !== undefined && existing.kind !== "bridge") {
            throw terminalError("NetworkLinkConflict", `Cannot use ${bridge} as the VM bridge: a ${existing.kind ?? "plain"} link has that name`);
          }
          if (existing === undefined) {
            await run(["ip", "link", "add", "name", bridge, "type", "bridge"]);
            ctx.onCleanup("delete bridge", () => this.#deleteLink(bridge));
          }
          // A bridge without its own address takes the lowest MAC of its ports, so it would change
          // as taps come and go, and every guest's ARP entry for the gateway would go stale.
          await run(["ip", "link", "set", "dev", bridge, "address", macFor(this.resolved.gateway)]);
          // The node has no business on the VM side over IPv6; no link-local address there either.
          await this.#disableIpv6(bridge);
        },
      },
      { name: "gateway address", run: () => run(["ip", "address", "replace", gateway, "dev", bridge]).then(() => undefined) },
      { name: "bridge up", run: () => run(["ip", "link", "set", "dev", bridge, "up"]).then(() => undefined) },
      // Per network namespace; a node that routes VM traffic must forward. Left on at teardown: other
      // software on the node may rely on it too.
      { name: "forwarding", run: () => run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]).then(() => undefined) },
      {
        name: "adopt ports",
        run: async (_s, ctx) => {
          ctx.onCleanup("forget adopted ports", () => {
            for (const vmId of this.#leases.keys()) this.#allocator.release(vmId);
            this.#leases.clear();
          });
          for (const port of vmPorts(links, this.config.tapPrefix)) {
            if (port.owner === undefined) continue;
            try {
              const address = this.#allocator.adopt(port.owner.vmId, port.owner.ip);
              // A restricted VM's allowed blocks are not on the node: nothing is allowed until it is attached again.
              this.#leases.set(port.owner.vmId, this.#lease(address, port.name, { egress: port.owner.egress, allowed: [] }));
            } catch (err) {
              this.#logger.warn({ port: port.name, error: String(err) }, "not adopting a VM port; the next sweep removes it");
              continue;
            }
            // Whatever changed it since, an adopted port on the bridge is isolated again.
            if (links.find((l) => l.name === port.name)?.master === bridge) await run(["bridge", "link", "set", "dev", port.name, "isolated", "on"]);
          }
        },
      },
      {
        name: "ruleset",
        run: async (_s, ctx) => {
          await this.#applyRuleset();
          ctx.onCleanup("delete ruleset", () => this.#runner.run(["nft", "-f", "-"], { input: renderTeardown(this.config.table) }).then(() => undefined));
        },
      },
    ];
    await runSteps(steps, undefined, { logger: this.#logger });
    this.#logger.info({ bridge, gateway, subnet: formatIpv4Cidr(this.resolved.subnet), netns: this.#runner.netns, adopted: this.#leases.size }, "node network ready");
  }

  async #attach(vmId: string, egress: ReturnType<typeof normalizeEgress>, owner: AttachOptions["tapOwner"]): Promise<NodeNetworkLease> {
    const tap = tapNameFor(this.config.tapPrefix, vmId);
    const known = this.#leases.get(vmId);
    const links = await this.#observe();
    if (known !== undefined && links.some((l) => l.name === tap && l.master === this.config.bridge)) {
      if (known.egress === egress.egress && known.allowed.join() === egress.allowed.join()) return known;
      const updated = { ...known, ...egress };
      await this.#runner.run(["ip", "link", "set", "dev", tap, "alias", tapAlias(updated.ip, updated.egress, vmId)]);
      this.#leases.set(vmId, updated);
      await this.#applyRuleset();
      this.#logger.info({ vmId, tap, egress: updated.egress }, "vm egress changed");
      return updated;
    }
    for (const [other, lease] of this.#leases) {
      if (other !== vmId && lease.tap === tap) {
        throw terminalError("NetworkTapNameCollision", `Cannot attach VM ${vmId}: its port name ${tap} is VM ${other}'s`);
      }
    }
    const run = (argv: string[]): Promise<unknown> => this.#runner.run(argv);
    const state: { lease?: NodeNetworkLease } = {};
    const steps: Step<typeof state>[] = [
      {
        name: "address",
        run: (s, ctx) => {
          const held = this.#allocator.lookup(vmId) !== undefined;
          s.lease = this.#lease(this.#allocator.allocate(vmId), tap, egress);
          if (!held) ctx.onCleanup("release address", () => { this.#allocator.release(vmId); });
        },
      },
      {
        name: "port",
        run: async (s, ctx) => {
          // A leftover of an interrupted attach has no trustworthy state: start it over.
          if (links.some((l) => l.name === tap)) await this.#deleteLink(tap);
          if (this.#portKind === "tap") {
            await run(["ip", "tuntap", "add", "dev", tap, "mode", "tap", ...(owner === undefined ? [] : ["user", String(owner.uid), "group", String(owner.gid)])]);
          } else {
            await run(["ip", "link", "add", "name", tap, "type", "veth", "peer", "name", s.lease?.peer ?? ""]);
          }
          ctx.onCleanup("delete port", () => this.#deleteLink(tap));
          await run(["ip", "link", "set", "dev", tap, "alias", tapAlias(s.lease?.ip ?? "", egress.egress, vmId)]);
          await this.#disableIpv6(tap);
        },
      },
      {
        // Rules first: the port joins the bridge only once its anti-spoofing rules exist.
        name: "ruleset",
        run: async (s, ctx) => {
          if (s.lease !== undefined) this.#leases.set(vmId, s.lease);
          ctx.onCleanup("ruleset without the port", async () => {
            this.#leases.delete(vmId);
            await this.#applyRuleset();
          });
          await this.#applyRuleset();
        },
      },
      {
        name: "bridge port",
        run: async () => {
          await run(["ip", "link", "set", "dev", tap, "master", this.config.bridge]);
          // Isolated ports forward only to non-isolated ones (the bridge itself): no VM-to-VM frames.
          await run(["bridge", "link", "set", "dev", tap, "isolated", "on"]);
          await run(["ip", "link", "set", "dev", tap, "up"]);
        },
      },
    ];
    await runSteps(steps, state, { logger: this.#logger });
    const lease = state.lease;
    if (lease === undefined) throw new Error("unreachable: attach finished without a lease");
    this.#logger.info({ vmId, tap, address: lease.address }, "vm network attached");
    return lease;
  }

  #lease(address: GuestAddress, tap: string, egress: ReturnType<typeof normalizeEgress>): NodeNetworkLease {
    // Any first letter but the tap's keeps the peer outside the prefix the rules and the sweep match.
    const peer = this.#portKind === "veth" ? `${tap.startsWith("v") ? "w" : "v"}${tap.slice(1)}` : undefined;
    const guest = { interface: "eth0", address: address.address, gateway: address.gateway, dns: this.config.dns };
    return { ...address, tap, dns: this.config.dns, ...egress, guest, ...(peer === undefined ? {} : { peer }) };
  }

  /** The node takes no part in IPv6 on the VM side. A kernel without IPv6 has nothing to disable. */
  async #disableIpv6(link: string): Promise<void> {
    const result = await this.#runner.run(["sysctl", "-q", "-w", `net.ipv6.conf.${link}.disable_ipv6=1`], { allowFailure: true });
    if (result.code !== 0 && !/cannot stat|No such file/.test(result.stderr)) {
      await this.#runner.run(["sysctl", "-q", "-w", `net.ipv6.conf.${link}.disable_ipv6=1`]);
    }
  }

  async #observe(): Promise<ObservedLink[]> {
    const { stdout } = await this.#runner.run(["ip", "-j", "-d", "link", "show"]);
    return parseLinks(stdout);
  }

  async #deleteLink(name: string): Promise<void> {
    const result = await this.#runner.run(["ip", "link", "del", "dev", name], { allowFailure: true });
    if (result.code !== 0 && !/Cannot find device|does not exist/.test(result.stderr)) {
      await this.#runner.run(["ip", "link", "del", "dev", name]);
    }
  }

  /** Re-reads the node's own networks each time: addresses can change while the agent runs. */
  async #applyRuleset(): Promise<void> {
    const { stdout } = await this.#runner.run(["ip", "-j", "addr", "show"]);
    const text = renderRuleset({
      table: this.config.table,
      bridge: this.config.bridge,
      uplink: this.config.uplink,
      tapPrefix: this.config.tapPrefix,
      subnet: formatIpv4Cidr(this.resolved.subnet),
      blockedV4: this.resolved.blockedV4,
      refusedV4: [...this.resolved.refusedV4, ...nodeNetworksOf(stdout, { bridge: this.config.bridge })],
      allowedV4: this.resolved.allowedV4,
      allowedTcpV4: this.resolved.allowedTcpV4,
      blockedV6: this.resolved.blockedV6,
      ports: [...this.#leases.values()].map((l) => ({ tap: l.tap, mac: l.mac, ip: l.ip, egress: l.egress, allowed: l.allowed })),
    });
    await this.#runner.run(["nft", "-f", "-"], { input: text });
  }
}
