import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findFatalConsoleLine, ConsoleLog } from "./console-log.ts";

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

describe("ConsoleLog", () => {
  it("follows the file, keeps a bounded tail and reports a fatal line split across writes once", async () => {
    const path = join(dir, "a.log");
    const seen: string[] = [];
    const log = new ConsoleLog(path, { tailBytes: 120, onFatal: (line) => seen.push(line) });
    await log.poll(); // the file does not exist yet: nothing, no error
    assert.equal(log.tail(), "");
    const chunks = ["x".repeat(100) + "\nKernel pa", "nic - not syncing: VFS\nKernel panic - not syncing: again\n"];
    appendFileSync(path, chunks[0] ?? "");
    await log.poll();
    assert.deepEqual(seen, []);
    appendFileSync(path, chunks[1] ?? "");
    await log.close();
    assert.deepEqual(seen, ["Kernel panic - not syncing: VFS"]);
    assert.ok(log.tail().length <= 120);
    assert.ok(chunks.join("").endsWith(log.tail()));
    assert.equal(log.tail(1), "");
    assert.equal(log.fatalLine, "Kernel panic - not syncing: VFS");
  });

  it("notices a fatal line by itself once started, and keeps multi-byte characters split across reads whole", async () => {
    const path = join(dir, "b.log");
    writeFileSync(path, "");
    let onFatal: (line: string) => void = () => undefined;
    const fatal = new Promise<string>((resolve) => (onFatal = resolve));
    const follower = new ConsoleLog(path, { pollMs: 10, onFatal: (line) => onFatal(line) }).start();
    const euro = Buffer.from("€");
    appendFileSync(path, Buffer.concat([Buffer.from("price "), euro.subarray(0, 1)]));
    // Several of the follower's 10 ms polls see the half character alone (no event says a poll ran).
    await new Promise((r) => setTimeout(r, 50));
    appendFileSync(path, Buffer.concat([euro.subarray(1), Buffer.from("\nimp-initramfs: FATAL: no root\n")]));
    assert.equal(await fatal, "imp-initramfs: FATAL: no root");
    await follower.close();
    assert.match(follower.tail(), /^price €\nimp-initramfs/);
  });

  it("reports a console past maxBytes once, with a tail that stays bounded however much the guest writes", async () => {
    const path = join(dir, "c.log");
    writeFileSync(path, "");
    const overflows: number[] = [];
    const log = new ConsoleLog(path, { tailBytes: 1024, maxBytes: 256 * 1024, onOverflow: (bytes) => overflows.push(bytes) });
    const line = "flood ".repeat(20) + "\n";
    for (let i = 0; i < 5; i++) {
      appendFileSync(path, line.repeat(1000));
      await log.poll();
    }
    await log.close();
    assert.equal(log.bytes, line.length * 5000);
    assert.equal(overflows.length, 1, "reported once");
    assert.ok((overflows[0] ?? 0) > 256 * 1024);
    assert.ok(log.tail().length <= 1024);
  });

  it("ignores fatal lines once disarmed (the guest agent answered), and when adopted unarmed", async () => {
    const path = join(dir, "d.log");
    writeFileSync(path, "[ 0.5] booting\n");
    const seen: string[] = [];
    const log = new ConsoleLog(path, { onFatal: (line) => seen.push(line) });
    await log.poll();
    log.disarm();
    appendFileSync(path, "Kernel panic - not syncing: printed by the job\nimp-initramfs: FATAL: also the job\n");
    await log.close();
    assert.deepEqual(seen, []);
    assert.equal(log.fatalLine, undefined);
    assert.match(log.tail(), /printed by the job/, "the lines are still kept for people to read");

    const seenAdopted: string[] = [];
    const adopted = new ConsoleLog(path, { armed: false, onFatal: (line) => seenAdopted.push(line) });
    await adopted.close();
    assert.deepEqual(seenAdopted, [], "an adopted VM's console was written after its boot");
  });
});
