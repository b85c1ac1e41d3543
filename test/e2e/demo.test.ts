import { execFile } from "node:child_process";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const demo = fileURLToPath(new URL("../../scripts/demo.ts", import.meta.url));

describe("the README demo (scripts/demo.ts, after setup)", () => {
  it("runs end to end on real components and stops everything it started", async () => {
    const { stdout } = await run(process.execPath, [demo], { timeout: 240_000, maxBuffer: 16 * 1024 * 1024 });
    assert.match(stdout, /installed 5 CRDs/);
    assert.match(stdout, /impvm\.imp\.dev\/hello created/);
    assert.match(stdout, /spec\.maxConcurrent: Invalid value: maxConcurrent must be at least minIdle/);
    assert.match(stdout, /answered hello over (vsock|serial)/);
    assert.match(stdout, /secret has 27 chars/);
    assert.doesNotMatch(stdout, /one-time-setup-never-logged/);
    assert.match(stdout, /job exited with code 7/);
    assert.match(stdout, /started=false, state=exited/);
    assert.match(stdout, /QEMU exited with code 0/);
    assert.match(stdout, /stopped everything the demo started/);
  });
});
