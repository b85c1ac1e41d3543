import { terminalError } from "../../shared/index.ts";
import { cidrContains, cidrsOverlap, formatIpv4, formatIpv4Cidr, parseIpv4, parseIpv4Cidr, type Ipv4Cidr } from "./ipv4.ts";

/** How one node's VM network is laid out. Defaults in {@link DEFAULT_NODE_NETWORK}; docs/network.md explains each. */
export interface NodeNetworkConfig {
  /** The host bridge every VM's tap joins. */
  readonly bridge: string;
  /** Tap names are this prefix and a hash of the VM id; everything with it on the node is the manager's. */
  readonly tapPrefix: string;
  /** The VMs' subnet; its first host address is the bridge's (the guests' gateway). */
  readonly subnet: string;
  /** The interface VM traffic may leave by, masqueraded to its address. */
  readonly uplink: string;
  /**
   * Blocks refused to VMs besides the non-public ones refused anyway: the cluster's service and pod
   * CIDRs where they are public addresses. Like them, an address in `allowedCidrs` opens them.
   */
  readonly blockedCidrs: readonly string[];
  /**
   * Destinations VMs may reach although they are refused by default (non-public, the node's own
   * networks, `blockedCidrs`): a registry mirror or a forge on the node's network. `A.B.C.D[/N]`
   * opens the block, `A.B.C.D[/N]:PORT` only that TCP port of it. Never opens the always-blocked ranges.
   */
  readonly allowedCidrs: readonly string[];
  /** Resolvers handed to guests. They are reached through the uplink like any internet host (the node runs none). */
  readonly dns: readonly string[];
  /** The nftables table name (in families inet and bridge). */
  readonly table: string;
}

export const DEFAULT_NODE_NETWORK: Omit<NodeNetworkConfig, "uplink"> = {
  bridge: "imp0",
  tapPrefix: "imp-",
  // Not 172.31.0.0/16 (the AWS default VPC) nor 10.96.0.0/12 / 10.244.0.0/16 (kubeadm's defaults).
  subnet: "10.231.0.0/24",
  blockedCidrs: [],
  allowedCidrs: [],
  dns: ["1.1.1.1", "8.8.8.8"],
  table: "imp",
};

/**
 * Always blocked, whatever the configuration: "this" network, loopback, link-local (169.254.169.254
 * is the metadata service of AWS, GCP, Azure, OpenStack and Oracle), Alibaba's metadata address,
 * multicast and the reserved block up to the limited broadcast.
 */
export const BUILTIN_BLOCKED_V4: readonly string[] = ["0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "100.100.100.200/32", "224.0.0.0/4", "240.0.0.0/4"];
/**
 * Refused by default, opened only by `allowedCidrs`: egress `internet` means public unicast. Every
 * IPv4 special-purpose block of the IANA registry (RFC 6890 and successors) that is not already
 * always-blocked: private (RFC 1918), shared/CGNAT (RFC 6598), IETF protocol assignments,
 * documentation (TEST-NET-1/2/3), the 6to4 relay anycast and benchmarking (RFC 2544).
 */
export const NON_PUBLIC_V4: readonly string[] = [
  "10.0.0.0/8",
  "100.64.0.0/10",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.0.2.0/24",
  "192.88.99.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "198.51.100.0/24",
  "203.0.113.0/24",
];
/** IPv6 from VMs is dropped entirely today; these stay named so a future IPv6 egress cannot forget them. */
export const BUILTIN_BLOCKED_V6: readonly string[] = ["::1/128", "fe80::/10", "fc00::/7", "fd00:ec2::254/128", "ff00::/8"];

export interface ResolvedNetworkConfig {
  readonly config: NodeNetworkConfig;
  readonly subnet: Ipv4Cidr;
  readonly gateway: number;
  /** Always blocked, whatever is allowed: the built-ins and the VM subnet itself, canonical text. */
  readonly blockedV4: readonly string[];
  /** Refused unless allowed: non-public blocks and the configured ones (the node's own networks are added at run time). */
  readonly refusedV4: readonly string[];
  /** The node's allow-list, canonical text: whole blocks, and `block . port` pairs (TCP only). */
  readonly allowedV4: readonly string[];
  readonly allowedTcpV4: readonly string[];
  readonly blockedV6: readonly string[];
}

const LINK_NAME = /^[A-Za-z0-9_.-]{1,15}$/;

/** Validates a configuration and derives the address plan. Pure; throws NetworkConfigInvalid. */
export function resolveNetworkConfig(partial: Partial<NodeNetworkConfig> & Pick<NodeNetworkConfig, "uplink">): ResolvedNetworkConfig {
  const config: NodeNetworkConfig = { ...DEFAULT_NODE_NETWORK, ...partial };
  const invalid = (what: string): never => {
    throw terminalError("NetworkConfigInvalid", `Cannot use node network configuration: ${what}`);
  };
  if (!LINK_NAME.test(config.uplink)) invalid(`uplink ${JSON.stringify(config.uplink)} is not a link name (1-15 of A-Z a-z 0-9 _ . -)`);
  // No dot in the bridge's name: it appears in sysctl keys, where a dot separates components.
  if (!/^[A-Za-z0-9_-]{1,15}$/.test(config.bridge)) invalid(`bridge ${JSON.stringify(config.bridge)} is not a link name without dots (1-15 of A-Z a-z 0-9 _ -)`);
  if (!/^[a-z][a-z0-9-]{0,4}$/.test(config.tapPrefix)) invalid(`tapPrefix ${JSON.stringify(config.tapPrefix)} must be 1-5 of a-z 0-9 - starting with a letter`);
  if (config.bridge.startsWith(config.tapPrefix) || config.uplink.startsWith(config.tapPrefix)) invalid(`bridge and uplink must not start with tapPrefix ${config.tapPrefix}`);
  if (config.bridge === config.uplink) invalid("bridge and uplink are the same link");
  if (!/^[a-z][a-z0-9_-]{0,31}$/.test(config.table)) invalid(`table ${JSON.stringify(config.table)} is not a plain name`);
  const subnet = parseIpv4Cidr(config.subnet);
  // ≥ /16 keeps the MAC (built from the address's low 24 bits) unique; ≤ /29 leaves room for VMs.
  if (subnet.prefix < 16 || subnet.prefix > 29) invalid(`subnet ${config.subnet} must be between /16 and /29`);
  const blocked = BUILTIN_BLOCKED_V4.map(parseIpv4Cidr);
  const configured = config.blockedCidrs.map(parseIpv4Cidr);
  for (const block of [...blocked, ...configured]) {
    if (cidrsOverlap(block, subnet)) invalid(`subnet ${config.subnet} overlaps blocked ${formatIpv4Cidr(block)}`);
  }
  const entries = config.allowedCidrs.map((entry) => {
    const m = /^([0-9.]+(?:\/[0-9]+)?)(?::([0-9]{1,5}))?$/.exec(entry);
    const port = m?.[2] === undefined ? undefined : Number(m[2]);
    if (m === null || (port !== undefined && (port < 1 || port > 65535))) invalid(`allowedCidrs entry ${JSON.stringify(entry)} is not A.B.C.D[/N] or A.B.C.D[/N]:PORT`);
    return { block: parseIpv4Cidr(m?.[1] ?? ""), port };
  });
  const allowed = entries.filter((e) => e.port === undefined).map((e) => e.block);
  for (const a of entries.map((e) => e.block)) {
    const hard = [...blocked, subnet].find((b) => cidrsOverlap(a, b));
    if (hard !== undefined) invalid(`allowedCidrs ${formatIpv4Cidr(a)} overlaps ${formatIpv4Cidr(hard)}, which VMs can never reach (loopback, link-local and metadata, multicast, reserved, the VM subnet)`);
  }
  const refused = [...NON_PUBLIC_V4.map(parseIpv4Cidr), ...configured];
  if (config.dns.length > 3) invalid("at most 3 dns servers (the guest protocol's limit)");
  for (const server of config.dns) {
    const ip = parseIpv4(server);
    // A resolver speaks UDP: only a whole allowed block opens it, never a TCP port.
    const unreachable = cidrContains(subnet, ip) || blocked.some((b) => cidrContains(b, ip)) || (refused.some((b) => cidrContains(b, ip)) && !allowed.some((a) => cidrContains(a, ip)));
    if (unreachable) invalid(`dns server ${server} is in a block VMs cannot reach (allow it with allowedCidrs if it is yours)`);
  }
  const canon = (blocks: readonly Ipv4Cidr[]): string[] => [...new Set(blocks.map(formatIpv4Cidr))];
  const allowedTcpV4 = [...new Set(entries.flatMap((e) => (e.port === undefined ? [] : [`${formatIpv4Cidr(e.block)} . ${e.port}`])))];
  return { config, subnet, gateway: subnet.network + 1, blockedV4: canon([...blocked, subnet]), refusedV4: canon(refused), allowedV4: canon(allowed), allowedTcpV4, blockedV6: BUILTIN_BLOCKED_V6 };
}

export function gatewayAddress(resolved: ResolvedNetworkConfig): string {
  return formatIpv4(resolved.gateway);
}
