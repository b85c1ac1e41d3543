import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_NODE_NETWORK, resolveNetworkConfig } from "./config.ts";

const invalid = (err: unknown): boolean => (err as { code?: string }).code === "NetworkConfigInvalid";

describe("resolveNetworkConfig", () => {
  it("derives the gateway and blocks built-ins, configured blocks and the VM subnet", () => {
    const r = resolveNetworkConfig({ uplink: "eth0", blockedCidrs: ["10.96.0.0/12", "10.244.0.0/16"] });
    assert.equal(r.config.subnet, DEFAULT_NODE_NETWORK.subnet);
    assert.equal(r.gateway, 0x0ae7_0001);
    for (const block of ["169.254.0.0/16", "127.0.0.0/8", "100.100.100.200/32", "10.96.0.0/12", "10.244.0.0/16", "10.231.0.0/24"]) assert.ok(r.blockedV4.includes(block), block);
    assert.ok(r.blockedV6.includes("fd00:ec2::254/128"));
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
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["10.96.0.10"], blockedCidrs: ["10.96.0.0/12"] }), invalid);
    assert.throws(() => resolveNetworkConfig({ uplink: "eth0", dns: ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"] }), invalid);
  });
});
