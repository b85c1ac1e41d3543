/**
 * The node's own IPv4 networks, from `ip -j addr show`: every global address's network, so a VM
 * refused non-public ranges is also refused the node's networks when they are public addresses (a
 * cloud VPC with public ranges, a pod network in CGNAT space). The VM bridge's own subnet is left
 * out (it is always blocked). Pure; the network manager asks `ip` and passes the text.
 */
import { formatIpv4Cidr, parseIpv4CidrMasked } from "./ipv4.ts";

interface IpAddrJson {
  readonly ifname?: unknown;
  readonly addr_info?: ReadonlyArray<{ readonly family?: unknown; readonly local?: unknown; readonly prefixlen?: unknown; readonly scope?: unknown }>;
}

export function nodeNetworksOf(ipAddrJson: string, except: { readonly bridge: string }): string[] {
  let links: unknown;
  try {
    links = JSON.parse(ipAddrJson);
  } catch {
    return [];
  }
  if (!Array.isArray(links)) return [];
  const nets = new Set<string>();
  for (const link of links as IpAddrJson[]) {
    if (link.ifname === except.bridge) continue;
    for (const a of link.addr_info ?? []) {
      if (a.family !== "inet" || a.scope !== "global" || typeof a.local !== "string" || typeof a.prefixlen !== "number") continue;
      try {
        nets.add(formatIpv4Cidr(parseIpv4CidrMasked(`${a.local}/${a.prefixlen}`)));
      } catch {
        // Not an IPv4 address after all: nothing to refuse.
      }
    }
  }
  return [...nets].sort();
}
