/**
 * A VM that cannot come up must fail its boot at once with the console's own words, leave its logs
 * under test-results/ and leave no process behind. Here the initramfs cannot find the init program.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { ImpError } from "../../src/shared/index.ts";
import { bootTestVm } from "../harness/vm.ts";

const resultsDir = resolve(import.meta.dirname, "../../test-results/e2e");

/** The first ImpError in an error's cause chain. */
function impErrorIn(err: unknown): ImpError | undefined {
  for (let e: unknown = err, depth = 0; e !== undefined && depth < 5; depth++) {
    if (e instanceof ImpError) return e;
    e = e instanceof Error ? e.cause : undefined;
  }
  return undefined;
}

describe("booting a VM whose init is missing", { timeout: 120_000 }, () => {
  it("fails with GuestBootFailed quoting the initramfs, keeps the serial log and leaves QEMU stopped", async () => {
    const name = `boot-failure-${process.pid}`;
    const started = Date.now();
    const err = await bootTestVm({ name, init: "/nonexistent/init", scratchMiB: 0, bootTimeoutMs: 60_000 }).then(
      () => assert.fail("boot succeeded"),
      (e: unknown) => e,
    );
    const cause = impErrorIn(err);
    assert.equal(cause?.code, "GuestBootFailed", String(err));
    assert.match(String((err as Error).message), /imp-initramfs: FATAL: init \/nonexistent\/init is not an executable file/);
    // Failing fast means well before the boot timeout: the console line ends the wait.
    assert.ok(Date.now() - started < 60_000);

    const kept = readdirSync(resultsDir).filter((d) => d.startsWith(`${name}-`));
    assert.equal(kept.length, 1);
    const serial = readFileSync(join(resultsDir, kept[0] ?? "", "serial.log"), "utf8");
    assert.match(serial, /imp-initramfs: FATAL/);
    assert.ok(existsSync(join(resultsDir, kept[0] ?? "", "qemu.log")));
  });
});
