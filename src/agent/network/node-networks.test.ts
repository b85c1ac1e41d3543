import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { nodeNetworksOf } from "./node-networks.ts";

describe("nodeNetworksOf()", () => {
  it("lists the network of every global IPv4 address but the VM bridge's", () => {
    const json = JSON.stringify([
      { ifname: "lo", addr_info: [{ family: "inet", local: "127.0.0.1", prefixlen: 8, scope: "host" }] },
      { ifname: "eth0", addr_info: [{ family: "inet", local: "203.0.113.77", prefixlen: 26, scope: "global" }, { family: "inet6", local: "2001:db8::7", prefixlen: 64, scope: "global" }] },
      { ifname: "cni0", addr_info: [{ family: "inet", local: "100.96.3.1", prefixlen: 24, scope: "global" }] },
      { ifname: "imp0", addr_info: [{ family: "inet", local: "10.231.0.1", prefixlen: 24, scope: "global" }] },
    ]);
    assert.deepEqual(nodeNetworksOf(json, { bridge: "imp0" }), ["100.96.3.0/24", "203.0.113.64/26"]);
  });

  it("gives nothing for text that is not ip's JSON", () => {
    assert.deepEqual(nodeNetworksOf("not json", { bridge: "imp0" }), []);
    assert.deepEqual(nodeNetworksOf('{"a":1}', { bridge: "imp0" }), []);
  });
});
