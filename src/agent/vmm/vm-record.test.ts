import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ImpError } from "../../shared/index.ts";
import type { VmSpec } from "./types.ts";
import { readVmRecord, removeVmRecord, vmRecordPath, writeVmRecord } from "./vm-record.ts";

const work = await mkdtemp(join(tmpdir(), "imp-vmrec-"));
after(() => rm(work, { recursive: true, force: true }));

const spec: VmSpec = {
  name: "vm-1", dir: work, vcpus: 2, memoryMiB: 512, kernel: "/k/vmlinuz", initrd: "/k/initrd", cmdline: "console=ttyS0 ro",
  drives: [{ id: "root", path: "/d/base.ext4", readOnly: true, isRoot: true }, { id: "scratch", path: "/d/scratch.ext4", readOnly: false, isRoot: false }],
  network: { tap: "imptap0", mac: "06:00:ac:10:00:02" },
  guestCid: 7,
};

const invalid = (pattern: RegExp) => (err: unknown): boolean => err instanceof ImpError && err.code === "VmRecordInvalid" && err.errorClass === "terminal" && pattern.test(err.message);

describe("vm record", () => {
  it("round-trips the spec, driver and channel, leaves no temporary file, and is private to its owner", async () => {
    await writeVmRecord(work, { driver: "qemu", channel: "vsock", spec });
    assert.deepEqual(await readVmRecord(work), { version: 1, driver: "qemu", channel: "vsock", spec });
    assert.deepEqual((await readdir(work)).filter((n) => n.endsWith(".tmp")), []);
    assert.equal((await stat(vmRecordPath(work))).mode & 0o777, 0o600);
    await writeVmRecord(work, { driver: "firecracker", channel: "vsock", spec: { ...spec, vcpus: 1 } });
    assert.equal((await readVmRecord(work))?.spec.vcpus, 1, "a second write replaces the first");
  });

  it("reads no record as undefined, and removing is idempotent", async () => {
    await removeVmRecord(work);
    await removeVmRecord(work);
    assert.equal(await readVmRecord(work), undefined);
  });

  it("refuses a record that is not JSON, of another version, driver or channel, or with a malformed spec", async () => {
    const cases: [string, RegExp][] = [
      ["{", /not JSON/],
      [JSON.stringify({ version: 2, driver: "qemu", channel: "vsock", spec }), /version 2, expected 1/],
      [JSON.stringify({ version: 1, driver: "cloud-hypervisor", channel: "vsock", spec }), /unknown driver/],
      [JSON.stringify({ version: 1, driver: "qemu", channel: "none", spec }), /unknown channel/],
      [JSON.stringify({ version: 1, driver: "qemu", channel: "serial" }), /no spec/],
      [JSON.stringify({ version: 1, driver: "qemu", channel: "serial", spec: { ...spec, guestCid: "7" } }), /spec\.guestCid is not an integer/],
      [JSON.stringify({ version: 1, driver: "qemu", channel: "serial", spec: { ...spec, drives: [{ id: "root" }] } }), /not a drive/],
      [JSON.stringify({ version: 1, driver: "qemu", channel: "serial", spec: { ...spec, network: { tap: 1 } } }), /spec\.network/],
    ];
    for (const [text, pattern] of cases) {
      await writeFile(vmRecordPath(work), text);
      await assert.rejects(readVmRecord(work), invalid(pattern), text);
    }
  });
});
