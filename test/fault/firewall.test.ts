/**
 * I6's static evidence read from a real kernel: the agent's own VM ruleset (renderRuleset) loaded
 * with nft into a network namespace of the test's, read back as the checker reads it, judged
 * holding; the same ruleset without the link-local block, or with no table at all, judged as it
 * must be (not holding; no VM network).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, it } from "node:test";
import { BUILTIN_BLOCKED_V4, BUILTIN_BLOCKED_V6, NON_PUBLIC_V4, renderRuleset } from "../../src/agent/network/index.ts";
import { readFirewall } from "./invariants.ts";
import { judgeI6, type Observation } from "./judge.ts";

const observation = (firewalls: Observation["firewalls"]): Observation => ({ at: 0, vms: [], github: { runners: [], sessionRefusals: 0, staleSetups: 0 }, nodeResources: [], firewalls });

function load(netns: string, blockedV4: readonly string[]): void {
  const ruleset = renderRuleset({
    table: "imp",
    bridge: "impbr0",
    uplink: "up0",
    tapPrefix: "imp-",
    subnet: "10.231.0.0/24",
    blockedV4,
    refusedV4: NON_PUBLIC_V4,
    allowedV4: [],
    allowedTcpV4: [],
    blockedV6: BUILTIN_BLOCKED_V6,
    ports: [{ tap: "imp-0123456789", mac: "02:00:00:00:00:02", ip: "10.231.0.2", egress: "internet", allowed: [] }],
  });
  execFileSync("ip", ["netns", "exec", netns, "nft", "-f", "-"], { input: ruleset });
}

let nftWorks = false;
try {
  execFileSync("nft", ["--version"], { stdio: "ignore" });
  nftWorks = process.getuid?.() === 0;
} catch {
  nftWorks = false;
}

describe("I6 from a node's loaded ruleset", { skip: nftWorks ? false : "needs root and nft" }, () => {
  it("the agent's ruleset holds; without the link-local block it does not; no table means no VM network", async (t) => {
    const netns = `imp-fw-test-${process.pid}`;
    execFileSync("ip", ["netns", "add", netns]);
    t.after(() => execFileSync("ip", ["netns", "del", netns]));
    const node = { nodeName: "node-x", stateDir: "/nonexistent", netns, cgroupParent: "imp/node-x" };

    const empty = await readFirewall(node);
    assert.equal(empty.noNetwork, true, "no Imp table: the node has no VM network");
    assert.equal(judgeI6(observation([empty])).held, true);

    load(netns, BUILTIN_BLOCKED_V4);
    const full = await readFirewall(node);
    assert.equal(full.noNetwork, false);
    const held = judgeI6(observation([full]));
    assert.equal(held.held, true, `${held.detail}\n${full.ruleset}`);

    load(netns, BUILTIN_BLOCKED_V4.filter((b) => !b.startsWith("169.254.")));
    const weak = judgeI6(observation([await readFirewall(node)]));
    assert.equal(weak.held, false);
    assert.match(weak.detail, /node-x lacks 169\.254\.0\.0\/16/);
  });
});
