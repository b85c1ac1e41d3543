/**
 * What a job can take of its runner's one-time setup, on the real runner path (docs/agent.md, "The
 * one-time runner setup inside the guest"). A job runs as its runner's user, so it can read its
 * runner's environment (/proc/$PPID/environ): with delivery `Environment` (what GitHub's runner
 * needs) the setup is there; with `Stdin` it is in no environment. Either way, what the setup buys
 * is nothing: a second runner session with it is refused while the job runs (the setup was used),
 * and after the job (the runner is gone) — as GitHub refuses a used JIT config.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../../src/shared/index.ts";
import { RunnerWorld, worldUnavailable } from "./runner-path/world.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# setup exposure cannot run on this machine: ${unavailable}\n`);

/** The job's step: find the setup in the runner's environment, try a second session with it, print both. */
const PROBE = [
  'setup="$(tr "\\0" "\\n" < /proc/$PPID/environ | sed -n "s/^ACTIONS_RUNNER_INPUT_JITCONFIG=//p")"',
  'if [ -z "$setup" ]; then echo "environ: no setup"; exit 0; fi',
  'echo "environ: setup found"',
  'IMP_TRY_JITCONFIG="$setup" /runner/imp-test-runner try-session',
  // Printed for the test's own attempt after the job (a job log is no place for a live secret:
  // here it shows what a job could carry away).
  'echo "setup=$setup"',
].join("\n");

describe("the one-time setup inside the guest: what a job can read, and what it buys", { skip: unavailable, timeout: 900_000 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start();
  });
  after(async () => {
    const left = await world?.dispose();
    assert.deepEqual(left ?? [], [], "nothing of the world is left on the host");
  });

  it("delivery Environment: the job finds the setup in its runner's environment, and a second session with it is refused during and after the job", async () => {
    await world.applyPool("env-pool", { minIdle: 1, maxConcurrent: 1, setupDelivery: "Environment", labels: ["self-hosted", "imp", "env"] });
    const job = world.queueJob("env-probe", [{ name: "probe", run: PROBE }], ["self-hosted", "imp", "env"]);
    await world.waitForJob(job, "completed");
    const log = job.result?.log ?? "";
    assert.equal(job.conclusion, "success", log);
    assert.match(log, /environ: setup found/);
    assert.match(log, /try-session: refused 409 (SessionConflict|SetupAlreadyUsed)/, "during the job: the runner holds the session its setup opened");
    const setup = /^setup=(\S+)$/m.exec(log)?.[1];
    assert.ok(setup !== undefined);
    // After the job: the ephemeral runner is gone; its setup opens nothing.
    const decoded = JSON.parse(Buffer.from(setup, "base64").toString("utf8")) as Record<string, string>;
    const runner = JSON.parse(Buffer.from(decoded[".runner"] ?? "", "base64").toString("utf8")) as { AgentId: number; AgentName: string; ServerUrl: string };
    const creds = JSON.parse(Buffer.from(decoded[".credentials"] ?? "", "base64").toString("utf8")) as { Data: { secret: string } };
    await waitFor("the runner gone from GitHub", () => (world.github.runnerNamed(runner.AgentName) === undefined ? true : undefined), { timeoutMs: 120_000, intervalMs: 200 });
    const response = await fetch(`${runner.ServerUrl}/sessions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ runnerId: runner.AgentId, runnerName: runner.AgentName, secret: creds.Data.secret }) });
    assert.equal(response.status, 401, "after the job: refused, the runner no longer exists");
  });

  it("delivery Stdin: the setup is in no environment of the runner, and the runner still came online with it", async () => {
    await world.applyPool("stdin-pool", { minIdle: 1, maxConcurrent: 1, setupDelivery: "Stdin", labels: ["self-hosted", "imp", "stdin"] });
    const job = world.queueJob("stdin-probe", [{ name: "probe", run: PROBE.replace("ACTIONS_RUNNER_INPUT_JITCONFIG", "[A-Z_]*JITCONFIG") }], ["self-hosted", "imp", "stdin"]);
    await world.waitForJob(job, "completed");
    const log = job.result?.log ?? "";
    assert.equal(job.conclusion, "success", log);
    assert.match(log, /environ: no setup/);
  });
});
