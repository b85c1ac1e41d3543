import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ImpError } from "../../shared/index.ts";
import { VmDir } from "./vm-dir.ts";

describe("VmDir", () => {
  it("puts every path of a VM under <stateDir>/vms/<id>", () => {
    const dir = VmDir.of("/var/lib/imp", "5b0e6c2a-8a7e-4c51-9f1e-0d4c2b7a9e11");
    assert.equal(dir.root, "/var/lib/imp/vms/5b0e6c2a-8a7e-4c51-9f1e-0d4c2b7a9e11");
    for (const path of [dir.vmm(), dir.exitKey()]) assert.ok(path.startsWith(`${dir.root}/`), path);
  });

  for (const id of ["", "../etc", "a/b", "UPPER", "x".repeat(65), "-lead"]) {
    it(`refuses the id ${JSON.stringify(id.slice(0, 20))}`, () => {
      assert.throws(() => VmDir.of("/s", id), (err: unknown) => err instanceof ImpError && err.code === "VmIdInvalid" && err.errorClass === "terminal");
    });
  }
});
