import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findFatalConsoleLine, SerialLog } from "./serial-log.ts";

const dir = mkdtempSync(join(tmpdir(), "imp-serial-test-"));
after(() => rmSync(dir, { recursive: true, force: true }));

describe("findFatalConsoleLine()", () => {
  it("waits for the newline before reporting a fatal line", () => {
    assert.equal(findFatalConsoleLine("imp-initramfs: FATAL: "), undefined);
    assert.equal(findFatalConsoleLine("imp-initramfs: FATAL: init /x is not an executable file\r\n"), "imp-initramfs: FATAL: init /x is not an executable file");
  });
  it("finds a kernel panic and an initramfs failure as whole lines", () => {
    assert.equal(findFatalConsoleLine("ok\r\n[ 1.2] Kernel panic - not syncing: Attempted to kill init!\r\nmore"), "[ 1.2] Kernel panic - not syncing: Attempted to kill init!");
    assert.equal(findFatalConsoleLine("imp-initramfs: FATAL: cannot load module x.ko\n"), "imp-initramfs: FATAL: cannot load module x.ko");
  });
  it("ignores an ordinary boot", () => assert.equal(findFatalConsoleLine("[ 0.3] PCI: Fatal: No config space access function found\n"), undefined));
});

describe("SerialLog", () => {
  it("writes every byte to the file, keeps a bounded tail and reports a fatal line split across chunks once", async () => {
    const seen: string[] = [];
    const log = new SerialLog(join(dir, "a.log"), { tailBytes: 120, onFatal: (line) => seen.push(line) });
    const chunks = ["x".repeat(100) + "\nKernel pa", "nic - not syncing: VFS\nKernel panic - not syncing: again\n"];
    for (const chunk of chunks) log.push(Buffer.from(chunk));
    await log.close();
    assert.deepEqual(seen, ["Kernel panic - not syncing: VFS"]);
    assert.ok(log.tail().length <= 120);
    assert.equal(readFileSync(join(dir, "a.log"), "utf8"), chunks.join(""));
    assert.equal(log.tail(1), "");
  });
});
