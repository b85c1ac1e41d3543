import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../../shared/index.ts";
import { AddressAllocator, macFor } from "./allocator.ts";
import { parseIpv4, parseIpv4Cidr } from "./ipv4.ts";

const subnet = parseIpv4Cidr("10.231.0.0/29"); // hosts .1 (gateway) … .6, broadcast .7: 5 VM addresses

describe("AddressAllocator", () => {
  it("gives the first VM the address after the gateway, with prefix, gateway and MAC", () => {
    const a = new AddressAllocator(subnet);
    assert.deepEqual(a.allocate("vm-a"), {
      vmId: "vm-a", ip: "10.231.0.2", prefix: 29, address: "10.231.0.2/29", gateway: "10.231.0.1", mac: "02:69:6d:e7:00:02",
    });
    assert.equal(a.capacity, 5);
  });

  it("is idempotent per VM and deterministic for the same history", () => {
    const history = (x: AddressAllocator): string[] => ["a", "b", "c"].map((id) => x.allocate(id).ip).concat(x.allocate("a").ip);
    assert.deepEqual(history(new AddressAllocator(subnet)), ["10.231.0.2", "10.231.0.3", "10.231.0.4", "10.231.0.2"]);
    assert.deepEqual(history(new AddressAllocator(subnet)), history(new AddressAllocator(subnet)));
  });

  it("never hands out an address in use, reuses a released one as late as possible, and reports exhaustion", () => {
    const a = new AddressAllocator(subnet);
    for (const id of ["a", "b", "c", "d", "e"]) a.allocate(id);
    assert.throws(() => a.allocate("f"), (err: unknown) => err instanceof ImpError && err.code === "NetworkAddressesExhausted");
    assert.equal(a.release("b"), true);
    assert.equal(a.release("b"), false);
    assert.equal(a.allocate("f").ip, "10.231.0.3", "the only free address");
    a.release("a");
    a.release("c");
    // After .3 the cursor moves on: .4 is c's old address, freed after a's .2 but later in the ring.
    assert.equal(a.allocate("g").ip, "10.231.0.4");
    assert.equal(a.allocate("h").ip, "10.231.0.2");
    const ips = a.inUse().map((x) => x.ip);
    assert.equal(new Set(ips).size, ips.length);
    assert.deepEqual(ips, ["10.231.0.2", "10.231.0.3", "10.231.0.4", "10.231.0.5", "10.231.0.6"]);
  });

  it("skips network, gateway and broadcast addresses", () => {
    const a = new AddressAllocator(subnet);
    const ips = ["a", "b", "c", "d", "e"].map((id) => a.allocate(id).ip);
    assert.ok(!ips.includes("10.231.0.0") && !ips.includes("10.231.0.1") && !ips.includes("10.231.0.7"));
  });

  it("adopts addresses found on the node and refuses conflicts and non-VM addresses", () => {
    const a = new AddressAllocator(subnet);
    assert.equal(a.adopt("a", "10.231.0.5").address, "10.231.0.5/29");
    assert.equal(a.adopt("a", "10.231.0.5").ip, "10.231.0.5", "adopting the same pair again is a no-op");
    assert.equal(a.allocate("b").ip, "10.231.0.6", "allocation continues after the adopted address");
    const code = (fn: () => unknown): string | undefined => {
      try {
        fn();
      } catch (err) {
        return (err as ImpError).code;
      }
      return undefined;
    };
    assert.equal(code(() => a.adopt("c", "10.231.0.5")), "NetworkAddressConflict");
    assert.equal(code(() => a.adopt("a", "10.231.0.4")), "NetworkAddressConflict");
    for (const bad of ["10.231.0.0", "10.231.0.1", "10.231.0.7", "10.231.1.2"]) assert.equal(code(() => a.adopt("d", bad)), "NetworkAddressInvalid", bad);
  });

  it("derives a locally administered unicast MAC from the address", () => {
    assert.equal(macFor(parseIpv4("10.231.18.200")), "02:69:6d:e7:12:c8");
    const first = Number.parseInt(macFor(parseIpv4("10.0.0.2")).slice(0, 2), 16);
    assert.equal(first & 0b11, 0b10, "locally administered, not multicast");
  });
});
