import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_NODE_NETWORK, resolveNetworkConfig } from "./config.ts";

const invalid = (err: unknown): boolean => (err as { code?: string }).code === "NetworkConfigInvalid";

describe("resolveNetworkConfig", () => {
  it("derives the gateway, always blocks the built-ins and the VM subnet, and refuses every non-public range and the configured ones", () => {
    const r = resolveNetworkConfig({ uplink: "eth0", blockedCidrs: ["44.96.0.0/12"] });
    assert.equal(r.config.subnet, DEFAULT_NODE_NETWORK.subnet);
    assert.equal(r.gateway, 0x0ae7_0001);
    for (const block of ["169.254.0.0/16", "127.0.0.0/8", "100.100.100.200/32", "224.0.0.0/4", "240.0.0.0/4", "0.0.0.0/8", "10.231.0.0/24"]) assert.ok(r.blockedV4.includes(block), block);
    // egress internet means public unicast: private, shared, documentation, benchmarking, IETF and relay blocks.
    for (const block of ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "198.18.0.0/15", "192.88.99.0/24", "44.96.0.0/12"]) {
      assert.ok(r.refusedV4.includes(block), block);
    }
    assert.deepEqual(r.allowedV4, []);
    assert.ok(r.blockedV6.includes("fd00:ec2::254/128"));
  });

  it("opens refused ranges only where allowedCidrs says, and never an always-blocked one", () => {
    const r = resolveNetworkConfig({ uplink: "eth0", allowedCidrs: ["192.168.7.10/32", "10.20.0.0/16", "198.18.3.2:8443", "198.18.4.0/24:443"] });
    assert.deepEqual(r.allowedV4, ["192.168.7.10/32", "10.20.0.0/16"]);
    assert.deepEqual(r.allowedTcpV4, ["198.18.3.2/32 . 8443", "198.18.4.0/24 . 443"]);
    for (const bad of ["198.18.3.2:0", "198.18.3.2:70000", "host:80", "198.18.3.2/33"]) assert.throws(() => resolveNetworkConfig({ uplink: "eth0", allowedCidrs: [bad] }), invalid, bad);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", allowedCidrs: ["169.254.169.254:80"] }), invalid, "a port of an always-blocked address");
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["10.0.0.53"], allowedCidrs: ["10.0.0.53:53"] }), invalid, "a resolver needs its whole address allowed (UDP)");
    for (const allowed of ["169.254.169.254/32", "127.0.0.1/32", "10.231.0.5/32", "224.0.0.251/32", "0.0.0.0/0"]) {
      assert.throws(() => resolveNetworkConfig({ uplink: "eth0", allowedCidrs: [allowed] }), invalid, allowed);
    }
    assert.doesNotThrow(() => resolveNetworkConfig({ uplink: "eth0", dns: ["10.0.0.53"], allowedCidrs: ["10.0.0.53/32"] }), "an allowed resolver on a private address");
  });

  it("refuses a subnet that overlaps a blocked range, bad sizes, bad names and unreachable resolvers", () => {
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", subnet: "10.96.0.0/24", blockedCidrs: ["10.96.0.0/12"] }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", subnet: "169.254.10.0/24" }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", subnet: "10.0.0.0/8" }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", subnet: "10.0.0.0/30" }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "a-very-long-uplink-name" }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", bridge: "imp-br" }), invalid, "bridge inside the tap prefix");
    assert.throws(() => resolveNetworkConfig({ uplink: "imp0" }), invalid, "bridge = uplink");
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", table: "imp; flush ruleset" }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["169.254.169.253"] }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["10.96.0.10"] }), invalid, "a private resolver not allowed");
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["44.96.0.10"], blockedCidrs: ["44.96.0.0/12"] }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"] }), invalid);
  });
});
