/**
 * The simulated node for the network tests, all inside namespaces the test creates:
 *
 *   vm1, vm2 (veth peers or QEMU guests) ── imp0 bridge ─┐ node ── up0 ═ veth ═ wan0 ── out
 *                                                        (lo also carries a second node address)
 *
 * `out` plays everything beyond the uplink: an internet host, the cluster's service and pod
 * addresses, the metadata service, a mirror on a private address that the node allow-lists, and one
 * address in every non-public block, each served by tcp-server.fixture.ts. The node also carries a
 * kube-proxy-like DNAT (a service address rewritten to the internet host), which the rules must judge
 * by the address the VM asked for. The "internet" is public unicast (44.31.0.0/24, in AMPRNet):
 * egress `internet` means exactly that, and every documentation or benchmarking address is refused
 * like any other non-public one. All of it lives in namespaces the test makes; none reaches the host.
 */
import type { TestNetwork } from "./netns.ts";

export const PLAN = {
  nodeUplink: "198.51.100.1",
  outUplink: "198.51.100.2",
  nodeLan: "192.168.77.5",
  internet: "44.31.0.10",
  /** A second internet host, outside a restricted VM's allowed block. */
  otherInternet: "44.31.1.10",
  dns: "44.31.0.53",
  clusterService: "10.96.0.1",
  pod: "10.244.1.5",
  /** A cluster whose pods have public addresses: refused only because the node config names the block. */
  publicPod: "44.200.1.5",
  metadata: "169.254.169.254",
  /** DNATed by the node to the internet host, as kube-proxy does for a service. */
  dnatService: "10.96.0.10",
  /** The same DNAT for a public address: proves the DNAT itself works. */
  dnatPlain: "44.31.0.80",
  /** A registry mirror on a private address: the node allow-lists its one TCP port. */
  mirror: "192.0.2.50",
  mirrorPort: 5000,
  /** One address in each non-public block that is not covered above. */
  nonPublic: ["10.1.2.3", "100.64.0.9", "172.16.5.5", "192.0.0.9", "192.0.2.9", "192.88.99.9", "192.168.50.5", "198.18.7.7", "203.0.113.9"],
  port: 8080,
  blockedCidrs: ["44.200.0.0/16"],
  /** The node's allow-list: one TCP port of the mirror. */
  allowedCidrs: ["192.0.2.50:5000"],
} as const;

export interface Topology {
  readonly net: TestNetwork;
  readonly node: string;
  readonly out: string;
}

export async function buildTopology(net: TestNetwork): Promise<Topology> {
  const node = await net.namespace("node");
  const out = await net.namespace("out");
  await net.exec(node, ["ip", "link", "add", "up0", "type", "veth", "peer", "name", "wan0", "netns", out]);
  await net.exec(node, ["ip", "address", "add", `${PLAN.nodeUplink}/24`, "dev", "up0"]);
  await net.exec(node, ["ip", "link", "set", "up0", "up"]);
  await net.exec(node, ["ip", "route", "add", "default", "via", PLAN.outUplink]);
  // A second node address (a LAN or pod-network address of a real node); on lo, as this kernel has no dummy links.
  await net.exec(node, ["ip", "address", "add", `${PLAN.nodeLan}/32`, "dev", "lo"]);
  await net.exec(out, ["ip", "address", "add", `${PLAN.outUplink}/24`, "dev", "wan0"]);
  await net.exec(out, ["ip", "link", "set", "wan0", "up"]);
  // A way back to the VM subnet, so that without the rules the VMs really would reach everything
  // here (the integration test's controls depend on it); with them, NAT makes it unused.
  await net.exec(out, ["ip", "route", "add", "10.231.0.0/24", "via", PLAN.nodeUplink]);
  for (const ip of [PLAN.internet, PLAN.otherInternet, PLAN.clusterService, PLAN.pod, PLAN.publicPod, PLAN.metadata, PLAN.mirror, ...PLAN.nonPublic]) await net.exec(out, ["ip", "address", "add", `${ip}/32`, "dev", "lo"]);
  const dnat = [
    "table ip kubesim {",
    "\tchain prerouting {",
    "\t\ttype nat hook prerouting priority dstnat; policy accept;",
    `\t\tip daddr { ${PLAN.dnatService}, ${PLAN.dnatPlain} } tcp dport 80 dnat to ${PLAN.internet}:${PLAN.port}`,
    "\t}",
    "}",
  ].join("\n");
  await net.exec(node, ["sh", "-c", `printf '%s\\n' '${dnat}' | nft -f -`]);
  await net.server(out, "out", [`0.0.0.0:${PLAN.port}`, `0.0.0.0:${PLAN.mirrorPort}`]);
  await net.server(node, "node", [`0.0.0.0:${PLAN.port}`]);
  return { net, node, out };
}

/** Every target a VM must not reach, as probe targets, by what they stand for. */
export function forbiddenTargets(otherVmIp: string, gateway: string): Record<string, string> {
  return {
    "the bridge gateway (node)": `${gateway}:${PLAN.port}`,
    "the node's uplink address": `${PLAN.nodeUplink}:${PLAN.port}`,
    "another node address": `${PLAN.nodeLan}:${PLAN.port}`,
    "a cluster service address": `${PLAN.clusterService}:${PLAN.port}`,
    "a pod address": `${PLAN.pod}:${PLAN.port}`,
    "a public pod address the node config blocks": `${PLAN.publicPod}:${PLAN.port}`,
    "the allow-listed mirror on a port not allowed": `${PLAN.mirror}:${PLAN.port}`,
    ...Object.fromEntries(PLAN.nonPublic.map((ip) => [`non-public ${ip}`, `${ip}:${PLAN.port}`])),
    "the metadata service": `${PLAN.metadata}:${PLAN.port}`,
    "a service DNATed to an allowed host": `${PLAN.dnatService}:80`,
    "another VM": `${otherVmIp}:${PLAN.port}`,
  };
}
