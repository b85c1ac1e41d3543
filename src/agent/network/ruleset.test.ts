import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { resolveNetworkConfig } from "./config.ts";
import { renderRuleset, renderTeardown, type RulesetInput } from "./ruleset.ts";

const golden = (name: string): string => readFileSync(join(import.meta.dirname, "testdata", name), "utf8");

function input(ports: RulesetInput["ports"]): RulesetInput {
  const r = resolveNetworkConfig({ uplink: "eth0", blockedCidrs: ["10.96.0.0/12", "10.244.0.0/16"] });
  return { table: "imp", bridge: "imp0", uplink: "eth0", tapPrefix: "imp-", subnet: "10.231.0.0/24", blockedV4: r.blockedV4, refusedV4: [...r.refusedV4, "203.0.113.64/26"], allowedV4: ["192.168.7.10/32"], allowedTcpV4: ["198.18.3.2/32 . 8443"], blockedV6: r.blockedV6, ports };
}

// The integration test (test/integration/network) applies these rulesets with the real nft and proves
// them with real connections; this test pins their exact text so every change to them is reviewed.
describe("renderRuleset", () => {
  it("renders the node's rules, one anti-spoofing block per VM port and each VM's egress (golden)", () => {
    const text = renderRuleset(input([
      { tap: "imp-bbbbbbbbbbb", mac: "02:69:6d:e7:00:03", ip: "10.231.0.3", egress: "restricted", allowed: ["140.82.112.0/20", "185.199.108.0/22"] },
      { tap: "imp-aaaaaaaaaaa", mac: "02:69:6d:e7:00:02", ip: "10.231.0.2", egress: "internet", allowed: [] },
      { tap: "imp-ccccccccccc", mac: "02:69:6d:e7:00:04", ip: "10.231.0.4", egress: "none", allowed: [] },
    ]));
    assert.equal(text, golden("three-vms.nft"));
  });

  it("renders a node without VMs: every port of the prefix is dropped", () => {
    assert.equal(renderRuleset(input([])), golden("no-vms.nft"));
  });

  it("is independent of the order of the ports", () => {
    const a = { tap: "imp-aaaaaaaaaaa", mac: "02:69:6d:e7:00:02", ip: "10.231.0.2", egress: "internet", allowed: [] } as const;
    const b = { tap: "imp-bbbbbbbbbbb", mac: "02:69:6d:e7:00:03", ip: "10.231.0.3", egress: "none", allowed: [] } as const;
    assert.equal(renderRuleset(input([a, b])), renderRuleset(input([b, a])));
  });

  it("renders a teardown that deletes both tables whether or not they exist", () => {
    assert.equal(renderTeardown("imp"), "table inet imp {}\ndelete table inet imp\ntable bridge imp {}\ndelete table bridge imp\n");
  });
});
