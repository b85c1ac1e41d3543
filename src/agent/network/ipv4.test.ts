import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { cidrContains, cidrsOverlap, formatIpv4, formatIpv4Cidr, minimalCover, parseIpv4Cidr, parseIpv4CidrMasked, tryParseIpv4 } from "./ipv4.ts";

describe("ipv4", () => {
  it("parses and formats dotted quads strictly", () => {
    assert.equal(tryParseIpv4("10.231.0.1"), 0x0ae7_0001);
    assert.equal(formatIpv4(0x0ae7_0001), "10.231.0.1");
    assert.equal(formatIpv4(0xffff_ffff), "255.255.255.255");
    for (const bad of ["10.0.0", "10.0.0.256", "010.0.0.1", "1.2.3.4.5", "", " 1.2.3.4", "a.b.c.d"]) assert.equal(tryParseIpv4(bad), undefined, bad);
  });

  it("parses CIDR blocks and refuses host bits, bad prefixes and garbage", () => {
    assert.equal(formatIpv4Cidr(parseIpv4Cidr("169.254.0.0/16")), "169.254.0.0/16");
    assert.equal(formatIpv4Cidr(parseIpv4Cidr("0.0.0.0/0")), "0.0.0.0/0");
    assert.equal(formatIpv4Cidr(parseIpv4Cidr("169.254.169.254")), "169.254.169.254/32");
    for (const bad of ["10.96.0.1/12", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/8/1", "10.0.0.0/08x"]) {
      assert.throws(() => parseIpv4Cidr(bad), (err: unknown) => (err as { code?: string }).code === "NetworkConfigInvalid", bad);
    }
  });

  it("tells containment and overlap", () => {
    const link = parseIpv4Cidr("169.254.0.0/16");
    assert.ok(cidrContains(link, 0xa9fe_a9fe));
    assert.ok(!cidrContains(link, 0xa9ff_0000));
    assert.ok(cidrsOverlap(parseIpv4Cidr("10.0.0.0/8"), parseIpv4Cidr("10.96.0.0/12")));
    assert.ok(cidrsOverlap(parseIpv4Cidr("10.96.0.0/12"), parseIpv4Cidr("10.0.0.0/8")));
    assert.ok(!cidrsOverlap(parseIpv4Cidr("10.96.0.0/12"), parseIpv4Cidr("10.112.0.0/12")));
    assert.ok(cidrContains(parseIpv4Cidr("0.0.0.0/0"), 0xffff_ffff));
  });

  it("masks host bits where asked (Kubernetes' isCIDR accepts them) and drops nested blocks", () => {
    assert.equal(formatIpv4Cidr(parseIpv4CidrMasked("140.82.112.7/20")), "140.82.112.0/20");
    assert.throws(() => parseIpv4CidrMasked("2001:db8::/32"), (err: unknown) => (err as { code?: string }).code === "NetworkConfigInvalid");
    const cover = minimalCover(["10.1.0.0/16", "10.0.0.0/8", "192.0.2.0/24", "10.2.3.4/32", "192.0.2.0/24"].map(parseIpv4Cidr));
    assert.deepEqual(cover.map(formatIpv4Cidr), ["10.0.0.0/8", "192.0.2.0/24"]);
  });
});
