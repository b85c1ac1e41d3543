import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { parseLinks, planSweep, vmPorts } from "./links.ts";

// Trimmed from `ip -j -d link show` (iproute2 6.1).
const sample = JSON.stringify([
  { ifindex: 1, ifname: "lo", flags: ["LOOPBACK", "UP"] },
  { ifindex: 2, ifname: "imp0", linkinfo: { info_kind: "bridge" } },
  { ifindex: 3, ifname: "imp-aaaaaaaaaaa", ifalias: "imp-vm 10.231.0.2 internet vm-a", master: "imp0", linkinfo: { info_kind: "tun", info_slave_kind: "bridge" } },
  { ifindex: 4, ifname: "imp-bbbbbbbbbbb", ifalias: "imp-vm 10.231.0.3 none vm-b", master: "imp0", linkinfo: { info_kind: "veth" } },
  { ifindex: 5, ifname: "imp-ccccccccccc", linkinfo: { info_kind: "tun" } },
  { ifindex: 6, ifname: "imp-notaport", linkinfo: { info_kind: "dummy" } },
  { ifindex: 7, ifname: "eth0" },
  "garbage",
  { ifindex: 8 },
]);

describe("links", () => {
  it("parses ip's JSON and finds the VM ports by prefix and kind", () => {
    const links = parseLinks(sample);
    assert.equal(links.length, 7);
    assert.deepEqual(links[2], { name: "imp-aaaaaaaaaaa", kind: "tun", alias: "imp-vm 10.231.0.2 internet vm-a", master: "imp0" });
    assert.deepEqual(vmPorts(links, "imp-").map((p) => [p.name, p.owner?.vmId]), [
      ["imp-aaaaaaaaaaa", "vm-a"],
      ["imp-bbbbbbbbbbb", "vm-b"],
      ["imp-ccccccccccc", undefined],
    ]);
    assert.deepEqual(parseLinks(""), []);
  });

  it("sweeps ports of VMs that are not live and ports without an owner, nothing else", () => {
    const ports = vmPorts(parseLinks(sample), "imp-");
    assert.deepEqual(planSweep(ports, new Set(["vm-a"])).map((p) => p.name), ["imp-bbbbbbbbbbb", "imp-ccccccccccc"]);
    assert.deepEqual(planSweep(ports, new Set(["vm-a", "vm-b"])).map((p) => p.name), ["imp-ccccccccccc"]);
  });
});
