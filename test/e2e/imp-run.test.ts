/**
 * `imp run` end to end, as a user runs it: a busybox image pushed to a real registry, `node
 * src/cli/main.ts run` as a child process booting a real QEMU VM with the real guest agent. The
 * command's stdout and stderr arrive on imp run's, its exit code is imp run's; SIGINT reaches the
 * command as a signal; and a SIGKILLed imp run leaves no VM process behind (die-with-parent), and
 * the next run removes its VM directory.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { waitFor } from "../../src/shared/index.ts";
import { buildImage, busyboxLayer } from "../harness/oci-image.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../harness/registry.ts";

const repoRoot = resolve(import.meta.dirname, "../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
const missing = [join(cacheDir, "bootkit", "current.json"), join(cacheDir, "guest", "imp-guest")].filter((p) => !existsSync(p));
const skip = missing.length > 0 ? `missing ${missing.join(", ")} (run scripts/setup.sh)` : false;

interface Run {
  readonly child: ChildProcess;
  readonly stdout: () => string;
  readonly stderr: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Live processes (not zombies) whose command line mentions `needle`. */
function processesMentioning(needle: string): string[] {
  return readdirSync("/proc").filter((e) => /^[0-9]+$/.test(e)).flatMap((pid) => {
    try {
      if (/\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"))) return [];
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      return cmdline.includes(needle) ? [`${pid} ${cmdline.replaceAll("\0", " ").slice(0, 120)}`] : [];
    } catch {
      return [];
    }
  });
}

describe("imp run", { timeout: 900_000, skip }, () => {
  let registry: RunningRegistry;
  let image: string;
  let stateDir: string;

  before(async () => {
    registry = await startRegistry();
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    image = `${registry.host}/test/busybox:1`;
    stateDir = await mkdtemp("/tmp/imp-run-e2e-");
  });
  after(async () => {
    await registry?.stop();
    if (stateDir !== undefined) await rm(stateDir, { recursive: true, force: true });
  });

  function impRun(command: readonly string[]): Run {
    const child = spawn(process.execPath, [join(repoRoot, "src/cli/main.ts"), "run", "--state-dir", stateDir, "--image", image, "--", ...command], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, IMP_CACHE: cacheDir },
    });
    let out = "";
    let err = "";
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (err += d.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
    return { child, stdout: () => out, stderr: () => err, exited };
  }

  async function untilGuestReady(run: Run): Promise<void> {
    await waitFor("imp run says the guest is ready", async () => (/guest ready/.test(run.stderr()) ? true : run.child.exitCode !== null ? Promise.reject(new Error(`imp run exited early: ${run.stderr()}`)) : undefined), {
      timeoutMs: 300_000,
      intervalMs: 100,
    });
  }

  it("streams the command's stdout and stderr and exits with its exit code", async () => {
    const run = impRun(["/bin/sh", "-c", "echo out; echo err >&2; exit 7"]);
    const { code } = await run.exited;
    assert.equal(code, 7, run.stderr());
    assert.equal(run.stdout(), "out\n");
    assert.match(run.stderr(), /^err$/m);
    assert.match(run.stderr(), /pulling .*busybox:1/, "progress while the image is pulled");
    assert.deepEqual(processesMentioning(stateDir), []);
    assert.deepEqual(readdirSync(join(stateDir, "vms")), [], "the VM directory is removed");
  });

  it("forwards SIGINT to the command, which ends promptly with the signal's exit code (128 + 2)", async (t) => {
    // The command says when it runs: SIGINT must reach a running command, not race its start.
    const run = impRun(["/bin/sh", "-c", "echo started; exec /bin/busybox sleep 600"]);
    await untilGuestReady(run);
    await waitFor("the command running in the guest", async () => (run.stdout().includes("started") ? true : run.child.exitCode !== null ? Promise.reject(new Error(`imp run exited early: ${run.stderr()}`)) : undefined), { timeoutMs: 120_000, intervalMs: 50 });
    const sent = performance.now();
    run.child.kill("SIGINT");
    const { code } = await run.exited;
    t.diagnostic(`SIGINT to exit of imp run: ${(performance.now() - sent).toFixed(0)} ms`);
    assert.equal(code, 130, run.stderr());
    assert.deepEqual(processesMentioning(stateDir), []);
    assert.deepEqual(readdirSync(join(stateDir, "vms")), []);
  });

  it("leaves no VM process when imp run is SIGKILLed, and the next run removes the VM directory it left", async () => {
    const run = impRun(["/bin/busybox", "sleep", "600"]);
    await untilGuestReady(run);
    const vms = processesMentioning(stateDir);
    assert.ok(vms.some((p) => p.includes("qemu-system")), `a QEMU of this run is running: ${vms.join("; ")}`);
    run.child.kill("SIGKILL");
    await run.exited;
    await waitFor("no process of the killed run", async () => (processesMentioning(stateDir).length === 0 ? true : undefined), { timeoutMs: 30_000, intervalMs: 100 });
    const left = readdirSync(join(stateDir, "vms"));
    assert.equal(left.length, 1, "a SIGKILLed run cannot remove its own VM directory");

    const next = impRun(["/bin/sh", "-c", "exit 0"]);
    assert.equal((await next.exited).code, 0, next.stderr());
    assert.deepEqual(readdirSync(join(stateDir, "vms")), [], "the next run removed the killed run's directory and its own");
  });
});
