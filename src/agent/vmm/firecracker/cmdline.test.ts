import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../../../shared/index.ts";
import { firecrackerCmdline } from "./cmdline.ts";

describe("firecrackerCmdline()", () => {
  it("puts the Firecracker base first and the caller's arguments after", () => {
    assert.equal(firecrackerCmdline(["ro", "root=/dev/vda", "init=/.imp/imp-guest"]), "console=ttyS0 reboot=k panic=1 pci=off ro root=/dev/vda init=/.imp/imp-guest");
  });

  it("lets the caller replace a base argument instead of passing it twice", () => {
    assert.equal(firecrackerCmdline(["panic=-1", "quiet"]), "console=ttyS0 reboot=k pci=off panic=-1 quiet");
  });

  it("refuses arguments with spaces or control characters", () => {
    const refused = (err: unknown): boolean => err instanceof ImpError && err.code === "KernelArgInvalid" && err.errorClass === "terminal" && /printable ASCII/.test(err.message);
    assert.throws(() => firecrackerCmdline(["a b"]), refused);
    assert.throws(() => firecrackerCmdline(["x\n"]), refused);
  });
});
