import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { normalizeEgress } from "./manager.ts";

describe("normalizeEgress", () => {
  it("keeps restricted IPv4 blocks canonical and without overlaps, ignoring IPv6 ones", () => {
    assert.deepEqual(normalizeEgress({ egress: "restricted", allowedCIDRs: ["140.82.112.9/20", "140.82.113.0/24", "2001:db8::/32", "185.199.108.0/22"] }), {
      egress: "restricted",
      allowed: ["140.82.112.0/20", "185.199.108.0/22"],
    });
    assert.deepEqual(normalizeEgress({ egress: "restricted", allowedCIDRs: ["2001:db8::/32"] }), { egress: "restricted", allowed: [] });
  });

  it("carries no blocks for internet and none, and refuses unknown modes and bad blocks", () => {
    assert.deepEqual(normalizeEgress({ egress: "internet", allowedCIDRs: ["10.0.0.0/8"] }), { egress: "internet", allowed: [] });
    assert.deepEqual(normalizeEgress({ egress: "none", allowedCIDRs: [] }), { egress: "none", allowed: [] });
    const invalid = (err: unknown): boolean => (err as { code?: string }).code === "NetworkEgressInvalid";
    assert.throws(() => normalizeEgress({ egress: "all" as "none", allowedCIDRs: [] }), invalid);
    assert.throws(() => normalizeEgress({ egress: "restricted", allowedCIDRs: ["10.0.0.0/40"] }), invalid);
  });
});
