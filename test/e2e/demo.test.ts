/**
 * The README demo (scripts/demo.ts) is the end-to-end scenario: real control plane, `imp operator`,
 * two `imp agent`s on simulated nodes, real registry, real QEMU, the GitHub test server. Every check
 * it prints is computed from the real system (test/e2e/runner-path/scenario.ts), and the first one
 * that fails ends the demo; this test runs it as a user would and asserts each step's checks held.
 */
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { worldUnavailable } from "./runner-path/world.ts";

const demo = fileURLToPath(new URL("../../scripts/demo.ts", import.meta.url));
const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# the demo cannot run on this machine: ${unavailable}\n`);

function runDemo(timeoutMs: number): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [demo], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    // SIGTERM first: the demo removes everything it started before it exits.
    const timer = setTimeout(() => child.kill("SIGTERM"), timeoutMs);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

describe("the README demo: one CI job in one microVM, end to end", { skip: unavailable, timeout: 1_800_000 }, () => {
  it("runs every step of the runner path on real parts, every check holds, and it removes everything it started", async () => {
    const { code, output } = await runDemo(1_500_000);
    process.stdout.write(output.replace(/^/gm, "# "));
    assert.equal(code, 0, "the demo exits 0");
    for (const held of [
      /✓ kubectl applied the runner pool/,
      /✓ its one-time setup was delivered to the guest/,
      /✓ the runner came online with its one-time setup/,
      /✓ the VM's status holds only the sealed setup, not the credential/,
      /✓ no operator or agent log contains the setup/,
      /✓ the idle runner \S+ took the job/,
      /✓ its output is in the job log on GitHub/,
      /✓ VM \S+ ended Succeeded with exit code 0/,
      /✓ no runner of that name is registered with GitHub/,
      /✓ its sealed setup left its status before it went/,
      /✓ nothing of it remains on node-[ab]: no process, socket, tap, cgroup or disk/,
      /✓ replacement \S+ is online on node-[ab]/,
      /✓ the three jobs ran on three VMs/,
      /✓ spread over both nodes: node-a, node-b/,
      /✓ iso-1 sees no other job's files/,
      /✓ iso-2 reaches none of the other VMs/,
      /✓ two VMs shared a node and each was refused the other's address/,
      /job timeline of VM \S+ on node-[ab]/,
      /stopped everything the demo started/,
    ]) {
      assert.match(output, held);
    }
    assert.doesNotMatch(output, /demo FAILED|CheckFailed/);
  });
});
