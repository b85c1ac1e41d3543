import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { assertVmId, parseTapAlias, tapAlias, tapNameFor } from "./tap-name.ts";

describe("tap names", () => {
  it("are the prefix and a hash of the VM id, at most 15 bytes, stable and distinct", () => {
    const name = tapNameFor("imp-", "runner-pool-a-7f3a");
    assert.match(name, /^imp-[0-9a-f]{11}$/);
    assert.equal(tapNameFor("imp-", "runner-pool-a-7f3a"), name);
    assert.notEqual(tapNameFor("imp-", "runner-pool-a-7f3b"), name);
    assert.equal(tapNameFor("vmtap", "x").length, 15);
    const many = new Set(Array.from({ length: 2000 }, (_, i) => tapNameFor("imp-", `vm-${i}`)));
    assert.equal(many.size, 2000);
  });

  it("carry the VM's address, egress mode and id in an alias that parses back", () => {
    assert.deepEqual(parseTapAlias(tapAlias("10.231.0.2", "restricted", "runner-7f3a")), { ip: "10.231.0.2", egress: "restricted", vmId: "runner-7f3a" });
    for (const bad of [undefined, "", "imp-vm 10.231.0.2 internet", "imp-vm x internet runner", "imp-vm 10.231.0.2 internet Runner_A", "imp-vm 10.231.0.2 all runner", "something else"]) {
      assert.equal(parseTapAlias(bad), undefined, String(bad));
    }
  });

  it("accept Kubernetes-style VM ids only", () => {
    assertVmId("runner-pool-a.7f3a");
    for (const bad of ["", "-a", "a-", "A", "a b", "a/b", "x".repeat(201)]) {
      assert.throws(() => assertVmId(bad), (err: unknown) => (err as { code?: string }).code === "NetworkVmIdInvalid", bad);
    }
  });
});
