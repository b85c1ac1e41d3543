import { test, before } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { GitHubScope } from "../../src/forge/index.ts";
import { receiveWebhooks, startGitHub } from "./harness.ts";

// guest/cmd/imp-test-runner on the host against the test server: a one-time setup runs one job,
// and is refused when used again; a runner killed mid-job loses its job within the lock timeout.

const GUEST = resolve(import.meta.dirname, "../../guest");
const ORG: GitHubScope = { kind: "org", org: "acme" };
let binary: string | undefined;
let skipReason: string | undefined;

before(() => {
  if (spawnSync("go", ["version"]).status !== 0) {
    skipReason = "no Go toolchain on PATH to build guest/cmd/imp-test-runner";
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "imp-test-runner-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  binary = join(dir, "imp-test-runner");
  const build = spawnSync("nice", ["go", "build", "-trimpath", "-o", binary, "./cmd/imp-test-runner"], {
    cwd: GUEST,
    env: { ...process.env, CGO_ENABLED: "0" },
    encoding: "utf8",
    timeout: 300_000,
  });
  assert.equal(build.status, 0, `go build failed: ${build.stderr}`);
});

interface RunnerExit {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function startRunner(args: string[], env: Record<string, string>, cwd: string): { exited: Promise<RunnerExit>; kill: (signal: NodeJS.Signals) => void } {
  const child = spawn(binary ?? "", args, { cwd, env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", TEST_RUNNER_IDLE_SECONDS: "60", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  return {
    kill: (signal) => child.kill(signal),
    exited: new Promise((resolve) =>
      child.on("close", (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      }),
    ),
  };
}

async function until(what: string, check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("a runner comes online with its one-time setup, runs exactly one job and cannot be started again", async (t) => {
  if (skipReason !== undefined) return t.skip(skipReason);
  const { server, client } = await startGitHub(t);
  const work = mkdtempSync(join(tmpdir(), "imp-runner-work-"));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const github = client();
  const jit = await github.generateJitConfig(ORG, { name: "imp-vm-1", runnerGroupId: 1, labels: ["imp"] });
  const setup = jit.encodedJitConfig.reveal();

  const runner = startRunner([], { ACTIONS_RUNNER_INPUT_JITCONFIG: setup }, work);
  await until("the runner is online", () => server.runners.get(jit.runnerId)?.status === "online");
  assert.equal((await github.getRunner(ORG, jit.runnerId))?.status, "online");

  // A second process with the same setup while the first holds the session: the real runner's 5.
  const twin = await startRunner(["--jitconfig", setup], {}, work).exited;
  assert.equal(twin.code, 5, twin.stderr);

  const job = server.queueJob({
    repo: { owner: "acme", repo: "web" },
    labels: ["self-hosted", "imp"],
    steps: [
      { name: "greet", run: "echo \"hello from $(uname -s)\"" },
      { name: "env", run: "echo \"jitconfig in job env: ${ACTIONS_RUNNER_INPUT_JITCONFIG:-none}\"" },
    ],
  });
  const second = server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [{ name: "x", run: "true" }] });
  const exit = await runner.exited;
  assert.equal(exit.code, 0, exit.stderr);
  assert.match(exit.stdout, /hello from Linux/);
  assert.match(exit.stdout, /jitconfig in job env: none/);
  assert.match(exit.stdout, /completed with result: Succeeded/);
  assert.ok(!exit.stdout.includes(setup) && !exit.stderr.includes(setup), "the setup is never printed");
  assert.equal(job.status, "completed");
  assert.equal(job.runnerName, "imp-vm-1");
  assert.deepEqual({ ...job.result, log: undefined }, { conclusion: "success", steps: [{ name: "greet", exitCode: 0 }, { name: "env", exitCode: 0 }], log: undefined });
  // The job's log reaches "GitHub" (the server) with the steps' output, and never the setup.
  assert.match(job.result?.log ?? "", /##\[group\]Run greet\nhello from Linux\n/);
  assert.ok(!(job.result?.log ?? "").includes(setup));
  assert.ok(job.queuedAt <= (job.startedAt ?? 0) && (job.startedAt ?? 0) <= (job.completedAt ?? 0), "queued ≤ started ≤ completed");
  assert.equal(second.status, "queued", "an ephemeral runner takes exactly one job");
  // GitHub removes an ephemeral runner after its job; deleting it afterwards is already done.
  assert.equal(await github.deleteRunner(ORG, jit.runnerId), "gone");

  const reused = await startRunner(["--jitconfig", setup], {}, work).exited;
  assert.equal(reused.code, 1, reused.stderr);
  assert.match(reused.stderr, /refused its setup/);
});

test("a failing step fails the job; the runner still exits 0 like the real one", async (t) => {
  if (skipReason !== undefined) return t.skip(skipReason);
  const { server, client } = await startGitHub(t);
  const work = mkdtempSync(join(tmpdir(), "imp-runner-work-"));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const jit = await client().generateJitConfig(ORG, { name: "imp-vm-2", runnerGroupId: 1, labels: ["imp"] });
  const job = server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [{ name: "boom", run: "echo about to fail; exit 7" }, { name: "after", run: "echo must-not-run" }] });
  const exit = await startRunner(["--jitconfig", jit.encodedJitConfig.reveal()], {}, work).exited;
  assert.equal(exit.code, 0, exit.stderr);
  assert.match(exit.stdout, /about to fail/);
  assert.doesNotMatch(exit.stdout, /must-not-run/);
  assert.deepEqual({ ...job.result, log: undefined }, { conclusion: "failure", steps: [{ name: "boom", exitCode: 7 }], log: undefined });
  assert.match(job.result?.log ?? "", /about to fail\n[^]*Process completed with exit code 7/);
});

test("a setup the runner cannot decode exits 1 without contacting anyone", async (t) => {
  if (skipReason !== undefined) return t.skip(skipReason);
  const exit = await startRunner(["--jitconfig", "not-a-setup"], {}, tmpdir()).exited;
  assert.equal(exit.code, 1);
  assert.match(exit.stderr, /Cannot start the runner: the jitconfig is not/);
});

test("a runner SIGKILLed mid-job stops renewing its lock: the server fails the job and frees the runner within the timeout", async (t) => {
  if (skipReason !== undefined) return t.skip(skipReason);
  const lockMs = 6_000;
  const { server, client } = await startGitHub(t, { jobLockTimeoutMs: lockMs });
  const hooks = await receiveWebhooks(t, server);
  const work = mkdtempSync(join(tmpdir(), "imp-runner-work-"));
  const github = client();
  const jit = await github.generateJitConfig(ORG, { name: "imp-vm-killed", runnerGroupId: 1, labels: ["imp"] });
  // The step records its pid, so the `sleep` the killed runner leaves behind (a dead VM takes it
  // along; a host process does not) can be ended afterwards.
  const job = server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [{ name: "long", run: "echo $$ > step.pid; exec sleep 60" }] });
  const runner = startRunner([], { ACTIONS_RUNNER_INPUT_JITCONFIG: jit.encodedJitConfig.reveal() }, work);
  t.after(() => {
    try {
      process.kill(Number(readFileSync(join(work, "_work", "step.pid"), "utf8")), "SIGKILL");
    } catch {
      // already gone
    }
    rmSync(work, { recursive: true, force: true });
  });
  await until("the job runs", () => job.status === "in_progress");
  // Alive, it renews: the job outlives the lock timeout while the runner renews every second.
  const renewals = (): number => server.requestsTo(new RegExp(`/jobs/${job.id}/renew$`)).filter((r) => r.status === 200).length;
  await until("the runner renewed its lock past the timeout", () => renewals() > lockMs / 1000);
  assert.equal(job.status, "in_progress");
  assert.equal((await github.getRunner(ORG, jit.runnerId))?.busy, true);
  assert.equal(await github.deleteRunner(ORG, jit.runnerId), "busy");

  runner.kill("SIGKILL");
  const exit = await runner.exited;
  assert.equal(exit.code, null, "killed, it gave back nothing");
  const killedAt = Date.now();
  await until("the server failed the lost job", () => job.status === "completed");
  assert.equal(job.conclusion, "failure");
  assert.match(job.result?.log ?? "", /imp-vm-killed lost communication with the server/);
  assert.ok((job.completedAt ?? 0) - (job.renewedAt ?? 0) > lockMs, "not before the lock timeout");
  assert.ok((job.renewedAt ?? 0) <= killedAt, "its last renewal came before the kill");
  t.diagnostic(`the job failed ${(job.completedAt ?? 0) - killedAt} ms after the kill (lock timeout ${lockMs} ms)`);
  // Freed: the registration is no longer busy — GitHub removed the ephemeral runner, so Imp's delete is done.
  assert.equal(server.runners.get(jit.runnerId), undefined);
  assert.equal(await github.deleteRunner(ORG, jit.runnerId), "gone");
  await server.webhooks.settled();
  assert.deepEqual(hooks.rejected, []);
  assert.deepEqual(
    hooks.events.filter((e) => e.jobId === job.id).map((e) => [e.action, e.runnerName, e.conclusion]),
    [
      ["queued", null, null],
      ["in_progress", "imp-vm-killed", null],
      ["completed", "imp-vm-killed", "failure"],
    ],
  );
});

test("a job cancelled while it runs: the runner learns it at its next renewal, stops the step's processes and exits 0", async (t) => {
  if (skipReason !== undefined) return t.skip(skipReason);
  const { server, client } = await startGitHub(t, { jobLockTimeoutMs: 4_000 });
  const work = mkdtempSync(join(tmpdir(), "imp-runner-work-"));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const jit = await client().generateJitConfig(ORG, { name: "imp-vm-cancel", runnerGroupId: 1, labels: ["imp"] });
  const job = server.queueJob({ repo: { owner: "acme", repo: "web" }, labels: ["imp"], steps: [{ name: "long", run: "sleep 60 & wait; echo not-stopped" }] });
  const runner = startRunner([], { ACTIONS_RUNNER_INPUT_JITCONFIG: jit.encodedJitConfig.reveal() }, work);
  await until("the job runs", () => job.status === "in_progress");
  assert.equal(server.cancelJob(job.id), true);
  const exit = await runner.exited;
  assert.equal(exit.code, 0, exit.stderr);
  assert.match(exit.stdout, /Job job-\d+ was cancelled/);
  assert.doesNotMatch(exit.stdout, /not-stopped/);
  assert.equal(job.conclusion, "cancelled");
  assert.equal(server.runners.get(jit.runnerId), undefined, "its session closed with its job done: removed");
});
