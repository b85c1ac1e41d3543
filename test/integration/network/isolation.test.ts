/**
 * The node network manager inside network namespaces this test creates (topology.ts): real bridge,
 * real veth ports standing in for VM taps, the real nftables ruleset, and real TCP connections. From a
 * "VM" namespace the internet host answers (masqueraded to the node's uplink address), and the
 * node's allow-listed mirror on its one allowed port; the node's own addresses, the cluster's service
 * and pod addresses, the metadata service, a service DNATed to an allowed host, an address in every
 * non-public block, the mirror's other ports and the other VM do not — while each of them answers a
 * connection from elsewhere, so it is the rules that refuse. Spoofed source addresses and MACs are dropped. Detach, adopt, sweep
 * and teardown are checked on the node; at the end nothing of the test's network is left.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { commandRunner, NodeNetwork, tapNameFor, type NetCommandRunner, type NodeNetworkLease } from "../../../src/agent/network/index.ts";
import { retryableError } from "../../../src/shared/index.ts";
import { networkTestsUnavailable, sh, TestNetwork, type ProbeResult } from "./netns.ts";
import { buildTopology, forbiddenTargets, PLAN, type Topology } from "./topology.ts";

const unavailable = await networkTestsUnavailable();
const config = { uplink: "up0", blockedCidrs: [...PLAN.blockedCidrs], allowedCidrs: [...PLAN.allowedCidrs], dns: [PLAN.dns] };

/** Moves a veth lease's peer into `ns` and configures it as the guest agent's `configure` would. */
async function plugGuest(net: TestNetwork, node: string, ns: string, lease: NodeNetworkLease): Promise<void> {
  assert.ok(lease.peer !== undefined);
  await net.exec(node, ["ip", "link", "set", lease.peer, "netns", ns]);
  await net.exec(ns, ["ip", "link", "set", lease.peer, "name", "eth0"]);
  await net.exec(ns, ["ip", "link", "set", "eth0", "address", lease.mac]);
  await net.exec(ns, ["ip", "address", "add", lease.address, "dev", "eth0"]);
  await net.exec(ns, ["ip", "link", "set", "eth0", "up"]);
  await net.exec(ns, ["ip", "route", "add", "default", "via", lease.gateway]);
}

function describeResults(results: Map<string, ProbeResult>): string {
  return [...results.values()].map((r) => `${r.target}: ${r.ok ? `ok "${r.reply ?? ""}"` : r.error ?? "?"}`).join("\n");
}

describe("node network isolation (network namespaces)", { skip: unavailable, timeout: 240_000 }, () => {
  const net = new TestNetwork();
  let topo: Topology;
  let network: NodeNetwork;
  let vm1: NodeNetworkLease;
  let vm2: NodeNetworkLease;
  let vm1ns: string;
  let vm2ns: string;
  let hostTablesBefore = "";

  before(async () => {
    hostTablesBefore = await sh(["nft", "list", "tables"]);
    topo = await buildTopology(net);
    network = await NodeNetwork.open({ netns: topo.node, portKind: "veth", config });
    vm1ns = await net.namespace("vm1");
    vm2ns = await net.namespace("vm2");
    vm1 = await network.attach("vm-1");
    vm2 = await network.attach("vm-2");
    await plugGuest(net, topo.node, vm1ns, vm1);
    await plugGuest(net, topo.node, vm2ns, vm2);
    await net.server(vm1ns, "vm1", [`0.0.0.0:${PLAN.port}`]);
    await net.server(vm2ns, "vm2", [`0.0.0.0:${PLAN.port}`]);
  });

  after(async () => {
    await net.dispose();
    assert.deepEqual(await net.leftovers(), [], "namespaces or links of this test remain");
    assert.equal(await sh(["nft", "list", "tables"]), hostTablesBefore, "the host's own nftables changed");
  });

  it("gives each VM its own address, MAC, gateway and tap-style port on the bridge, isolated", async () => {
    assert.equal(vm1.address, "10.231.0.2/24");
    assert.equal(vm2.address, "10.231.0.3/24");
    assert.equal(vm1.gateway, "10.231.0.1");
    assert.notEqual(vm1.mac, vm2.mac);
    assert.deepEqual(vm1.dns, [PLAN.dns]);
    assert.deepEqual(vm1.guest, { interface: "eth0", address: "10.231.0.2/24", gateway: "10.231.0.1", dns: [PLAN.dns] });
    assert.equal(vm1.egress, "internet");
    assert.match(vm1.tap, /^imp-[0-9a-f]{11}$/);
    const details = await net.exec(topo.node, ["ip", "-d", "link", "show", "dev", vm1.tap]);
    assert.match(details, /master imp0/);
    assert.match(details, /isolated on/);
    assert.match(details, /alias imp-vm 10\.231\.0\.2 internet vm-1/);
    // A fixed bridge MAC: otherwise it follows the lowest port MAC and the guests' gateway ARP entries go stale.
    assert.match(await net.exec(topo.node, ["ip", "link", "show", "dev", "imp0"]), /link\/ether 02:69:6d:e7:00:01 /);
  });

  it("serves every target from outside the VMs (the controls)", async () => {
    const targets = [PLAN.internet, PLAN.clusterService, PLAN.pod, PLAN.publicPod, PLAN.metadata, PLAN.mirror, ...PLAN.nonPublic, PLAN.nodeUplink, PLAN.nodeLan, vm1.gateway].map((ip) => `${ip}:${PLAN.port}`);
    targets.push(`${PLAN.mirror}:${PLAN.mirrorPort}`);
    const results = await net.probe(topo.node, targets);
    for (const target of targets) assert.equal(results.get(target)?.ok, true, describeResults(results));
    // Not even the node reaches a VM over IP (the VM's replies to a node address are dropped like any
    // packet to the node; the agent talks to guests over vsock), so each VM's server is checked from
    // inside its own namespace.
    for (const [ns, lease] of [[vm1ns, vm1], [vm2ns, vm2]] as const) {
      const own = await net.probe(ns, [`${lease.ip}:${PLAN.port}`]);
      assert.equal(own.get(`${lease.ip}:${PLAN.port}`)?.ok, true, describeResults(own));
    }
    // That the DNAT works is shown from a VM: the plain DNATed address reaches the internet host (next test).
  });

  it("lets a VM reach the internet host, masqueraded to the node's uplink address, also through a DNAT", async () => {
    const results = await net.probe(vm1ns, [`${PLAN.internet}:${PLAN.port}`, `${PLAN.dnatPlain}:80`]);
    assert.equal(results.get(`${PLAN.internet}:${PLAN.port}`)?.reply, `out ${PLAN.nodeUplink}`, describeResults(results));
    assert.equal(results.get(`${PLAN.dnatPlain}:80`)?.reply, `out ${PLAN.nodeUplink}`, describeResults(results));
  });

  it("lets a VM reach the one port of a private address the node allow-lists, and nothing else of it", async () => {
    const allowed = `${PLAN.mirror}:${PLAN.mirrorPort}`;
    const other = `${PLAN.mirror}:${PLAN.port}`;
    const results = await net.probe(vm1ns, [allowed, other]);
    assert.equal(results.get(allowed)?.reply, `out ${PLAN.nodeUplink}`, describeResults(results));
    assert.equal(results.get(other)?.ok, false, describeResults(results));
  });

  it("refuses a VM the node, the cluster, metadata, every non-public block, a DNATed service and the other VM", async () => {
    for (const [vmNs, other] of [[vm1ns, vm2], [vm2ns, vm1]] as const) {
      const forbidden = forbiddenTargets(other.ip, other.gateway);
      const results = await net.probe(vmNs, Object.values(forbidden));
      for (const [what, target] of Object.entries(forbidden)) {
        assert.equal(results.get(target)?.ok, false, `${what} (${target}) was reachable from ${vmNs}:\n${describeResults(results)}`);
      }
    }
  });

  it("is what refuses them: without its ruleset and port isolation every one answers; open() restores both", async () => {
    await net.exec(topo.node, ["nft", "delete", "table", "inet", "imp"]);
    await net.exec(topo.node, ["nft", "delete", "table", "bridge", "imp"]);
    for (const lease of [vm1, vm2]) await net.exec(topo.node, ["bridge", "link", "set", "dev", lease.tap, "isolated", "off"]);
    const forbidden = forbiddenTargets(vm2.ip, vm1.gateway);
    const open = await net.probe(vm1ns, Object.values(forbidden));
    for (const [what, target] of Object.entries(forbidden)) assert.equal(open.get(target)?.ok, true, `${what} (${target}), control:\n${describeResults(open)}`);
    network = await NodeNetwork.open({ netns: topo.node, portKind: "veth", config });
    const closed = await net.probe(vm1ns, Object.values(forbidden));
    for (const [what, target] of Object.entries(forbidden)) assert.equal(closed.get(target)?.ok, false, `${what} (${target}) after open():\n${describeResults(closed)}`);
  });

  it("drops a VM's packets with a spoofed source address or MAC", async () => {
    const internet = `${PLAN.internet}:${PLAN.port}`;
    await net.exec(vm1ns, ["ip", "address", "add", "10.231.0.77/24", "dev", "eth0"]);
    try {
      const spoofed = await net.probe(vm1ns, [`${internet}@10.231.0.77`, `${internet}@${vm1.ip}`]);
      assert.equal(spoofed.get(`${internet}@10.231.0.77`)?.ok, false, describeResults(spoofed));
      assert.equal(spoofed.get(`${internet}@${vm1.ip}`)?.ok, true, describeResults(spoofed));
    } finally {
      await net.exec(vm1ns, ["ip", "address", "del", "10.231.0.77/24", "dev", "eth0"]);
    }
    await net.exec(vm1ns, ["ip", "link", "set", "eth0", "address", "02:69:6d:ff:ff:01"]);
    try {
      const results = await net.probe(vm1ns, [internet]);
      assert.equal(results.get(internet)?.ok, false, describeResults(results));
    } finally {
      await net.exec(vm1ns, ["ip", "link", "set", "eth0", "address", vm1.mac]);
      // The node may have learnt the spoofed MAC for vm1's address; forget it.
      await net.exec(topo.node, ["ip", "neigh", "flush", "dev", "imp0"]);
    }
    const again = await net.probe(vm1ns, [internet]);
    assert.equal(again.get(internet)?.ok, true, describeResults(again));
  });

  it("applies each VM's egress: restricted reaches only its allowed blocks (never a blocked one), none reaches nothing", async () => {
    const vm3ns = await net.namespace("vm3");
    const allowed = `${PLAN.internet}:${PLAN.port}`;
    const other = `${PLAN.otherInternet}:${PLAN.port}`;
    const cluster = `${PLAN.clusterService}:${PLAN.port}`;
    const vm3 = await network.attach("vm-3", { egress: "restricted", allowedCIDRs: ["44.31.0.7/24", "10.96.0.0/12", "2001:db8::/32"] });
    try {
      assert.deepEqual(vm3.allowed, ["10.96.0.0/12", "44.31.0.0/24"]);
      await plugGuest(net, topo.node, vm3ns, vm3);
      const restricted = await net.probe(vm3ns, [allowed, other, cluster]);
      assert.equal(restricted.get(allowed)?.ok, true, describeResults(restricted));
      assert.equal(restricted.get(other)?.ok, false, describeResults(restricted));
      assert.equal(restricted.get(cluster)?.ok, false, `a template's allowed block inside a refused one stays refused (only the node allow-lists):\n${describeResults(restricted)}`);
      const internet = await net.probe(vm1ns, [other]);
      assert.equal(internet.get(other)?.ok, true, `control: an internet VM reaches it:\n${describeResults(internet)}`);
      const none = await network.attach("vm-3", { egress: "none", allowedCIDRs: [] });
      assert.equal(none.ip, vm3.ip);
      assert.match(await net.exec(topo.node, ["ip", "-d", "link", "show", "dev", vm3.tap]), /alias imp-vm \S+ none vm-3/);
      const nothing = await net.probe(vm3ns, [allowed, other]);
      assert.equal(nothing.get(allowed)?.ok, false, describeResults(nothing));
      assert.equal(nothing.get(other)?.ok, false, describeResults(nothing));
    } finally {
      await network.detach("vm-3");
    }
  });

  it("is idempotent: attach again returns the same lease; a new manager adopts the ports with the same addresses", async () => {
    assert.deepEqual(await network.attach("vm-1"), vm1);
    const rulesBefore = await net.exec(topo.node, ["nft", "list", "ruleset"]);
    const second = await NodeNetwork.open({ netns: topo.node, portKind: "veth", config });
    assert.deepEqual(second.leases().map((l) => [l.vmId, l.address, l.tap, l.mac]).sort(), [
      ["vm-1", vm1.address, vm1.tap, vm1.mac],
      ["vm-2", vm2.address, vm2.tap, vm2.mac],
    ]);
    assert.equal(await net.exec(topo.node, ["nft", "list", "ruleset"]), rulesBefore);
    assert.equal((await second.attach("vm-3")).ip, "10.231.0.4", "no adopted address is handed out again");
    await second.detach("vm-3");
    network = second;
  });

  it("detaches one VM and leaves the other working", async () => {
    await network.detach("vm-2");
    await network.detach("vm-2");
    const links = await net.exec(topo.node, ["ip", "-o", "link", "show"]);
    assert.ok(!links.includes(vm2.tap), links);
    assert.ok(links.includes(vm1.tap), links);
    assert.ok(!(await net.exec(topo.node, ["nft", "list", "table", "bridge", "imp"])).includes(vm2.tap));
    const results = await net.probe(vm1ns, [`${PLAN.internet}:${PLAN.port}`, `${PLAN.metadata}:${PLAN.port}`]);
    assert.equal(results.get(`${PLAN.internet}:${PLAN.port}`)?.ok, true, describeResults(results));
    assert.equal(results.get(`${PLAN.metadata}:${PLAN.port}`)?.ok, false, describeResults(results));
  });

  it("sweeps the ports of VMs that are no longer live, then tears down everything it owns", async () => {
    assert.deepEqual(await network.sweep(["vm-1"]), []);
    // The agent's sweep passes a membership that is asked, never listed (empty when iterated): the
    // manager must ask it, not copy it (a copy once removed every live VM's tap).
    const askedOnly = new (class extends Set<string> {
      override has(id: string): boolean {
        return id === "vm-1";
      }
    })();
    assert.deepEqual(await network.sweep(askedOnly), [], "a live VM's tap survives a sweep whose live set can only be asked");
    assert.deepEqual(await network.sweep([]), [vm1.tap]);
    assert.deepEqual(network.leases(), []);
    await network.teardown();
    await network.teardown();
    const links = (JSON.parse(await net.exec(topo.node, ["ip", "-j", "link", "show"])) as { ifname: string }[]).map((l) => l.ifname).sort();
    assert.deepEqual(links, ["lo", "up0"]);
    const tables = await net.exec(topo.node, ["nft", "list", "tables"]);
    assert.doesNotMatch(tables, /\bimp\b/);
    assert.match(tables, /table ip kubesim/, "the teardown removed only its own tables");
  });
});

describe("node network taps (network namespace)", { skip: unavailable, timeout: 60_000 }, () => {
  const net = new TestNetwork();
  after(async () => {
    await net.dispose();
    assert.deepEqual(await net.leftovers(), []);
  });

  it("creates persistent taps, owned by the VMM's uid:gid when asked, on the bridge and isolated", async () => {
    const node = await net.namespace("tapnode");
    await net.exec(node, ["ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1"]);
    const network = await NodeNetwork.open({ netns: node, config: { uplink: "up0" } });
    const plain = await network.attach("vm-plain");
    const owned = await network.attach("vm-owned", undefined, { tapOwner: { uid: 4242, gid: 4343 } });
    const plainInfo = await net.exec(node, ["ip", "-d", "link", "show", "dev", plain.tap]);
    const ownedInfo = await net.exec(node, ["ip", "-d", "link", "show", "dev", owned.tap]);
    assert.match(plainInfo, /tun type tap .*persist on/);
    assert.doesNotMatch(plainInfo, / user /);
    assert.match(ownedInfo, /tun type tap .*user 4242 group 4343/);
    for (const info of [plainInfo, ownedInfo]) {
      assert.match(info, /master imp0/);
      assert.match(info, /isolated on/);
    }
    await assert.rejects(network.attach("vm-bad", undefined, { tapOwner: { uid: -1, gid: 0 } }), (err: unknown) => (err as { code?: string }).code === "NetworkTapOwnerInvalid");
    await network.teardown();
    assert.deepEqual((JSON.parse(await net.exec(node, ["ip", "-j", "link", "show"])) as { ifname: string }[]).map((l) => l.ifname).sort(), ["lo", "up0", "up1"]);
  });

  it("rolls a failed attach back: no port, no rule and no address of it remain, other VMs untouched", async () => {
    const node = await net.namespace("failnode");
    await net.exec(node, ["ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1"]);
    const real = commandRunner({ netns: node, timeoutMs: 10_000 });
    let failIsolation = false;
    const runner: NetCommandRunner = {
      netns: node,
      run: async (argv, options) => {
        if (failIsolation && argv[0] === "bridge") throw retryableError("NetworkCommandFailed", "Cannot run bridge: injected failure");
        return real.run(argv, options);
      },
    };
    const network = await NodeNetwork.open({ runner, config: { uplink: "up0" } });
    const kept = await network.attach("vm-kept");
    const rulesBefore = await net.exec(node, ["nft", "list", "ruleset"]);
    failIsolation = true;
    await assert.rejects(network.attach("vm-failed"), (err: unknown) => (err as { code?: string }).code === "NetworkCommandFailed");
    failIsolation = false;
    const links = await net.exec(node, ["ip", "-o", "link", "show"]);
    assert.ok(!links.includes(tapNameFor("imp-", "vm-failed")), links);
    assert.ok(links.includes(kept.tap), links);
    assert.equal(await net.exec(node, ["nft", "list", "ruleset"]), rulesBefore);
    assert.deepEqual(network.leases().map((l) => l.vmId), ["vm-kept"]);
    // Had the failed attach kept its address (.3), attaching the same VM again would get it back.
    assert.equal((await network.attach("vm-failed")).ip, "10.231.0.4", "the failed attach's address was released");
    await network.teardown();
  });
});
