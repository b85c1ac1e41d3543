/**
 * The Gitea forge (src/forge/gitea) against a real Gitea 1.27.3, with the real gitea-runner v1.0.8
 * run on this host from the `.runner` file the forge minted: the one-time setup works with the
 * real runner exactly once, a replayed one is refused, a registration left by a crash is cleaned
 * up by the next mint, an unused runner is removable, demand is the scope's queued jobs, a finished
 * job's facts (event, branch, conclusion: what the cache trust rule reads) come from Gitea's API, and
 * a runner mid-job is busy even when Gitea's own flag has gone idle.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { GiteaClient, GiteaForge, type GiteaScope } from "../../../src/forge/index.ts";
import { CredentialText } from "../../../src/forge/index.ts";
import { waitFor } from "../../../src/shared/index.ts";
import { decidePromotion, DEFAULT_PROMOTION_RULE } from "../../../src/operator/index.ts";
import { GITEA_RUNNER_BIN, GiteaServer, giteaUnavailable } from "../../gitea/gitea-server.ts";

const exec = promisify(execFile);
const unavailable = giteaUnavailable();
if (unavailable !== undefined) process.stdout.write(`# gitea forge: cannot run: ${unavailable}\n`);

const WORKFLOW = `on: [push]
jobs:
  build:
    runs-on: imp-linux
    steps:
      - run: echo "hello from $GITEA_ACTIONS on $(uname -s)"
      - run: test "$GREETING" = hi
        env:
          GREETING: hi
`;

describe("Gitea forge", { skip: unavailable, timeout: 300_000 }, () => {
  let gitea: GiteaServer;
  const webScope: GiteaScope = { kind: "repo", owner: "acme", repo: "web" };
  let tokens = 0;
  const forge = (scope: GiteaScope = webScope): GiteaForge => {
    const client = new GiteaClient({ baseUrl: gitea.url, token: new CredentialText(gitea.token, "token") });
    let cached: CredentialText | undefined;
    return new GiteaForge({
      client,
      scope,
      url: gitea.url,
      labels: ["imp-linux"],
      registrationToken: async (s) => {
        if (cached === undefined) {
          tokens++;
          cached = await client.registrationToken(scope, s);
        }
        return cached;
      },
      forgetRegistrationToken: () => (cached = undefined),
    });
  };

  /** Runs the real gitea-runner on this host with a minted `.runner`, to completion (bounded). */
  async function runRunner(setup: string): Promise<{ code: number; output: string }> {
    const dir = await mkdtemp("/dev/shm/imp-gitea-runner-");
    try {
      await writeFile(join(dir, ".runner"), setup, { mode: 0o600 });
      await writeFile(join(dir, "config.yaml"), `log: {level: info}\nrunner: {file: ${dir}/.runner, fetch_interval: 1s, fetch_interval_max: 2s}\ncache: {enabled: false}\nhost: {workdir_parent: ${dir}/work}\n`);
      try {
        const { stdout, stderr } = await exec("timeout", ["60", GITEA_RUNNER_BIN, "-c", join(dir, "config.yaml"), "daemon", "--once"], { env: { ...process.env, HOME: dir }, maxBuffer: 8 << 20 });
        return { code: 0, output: stdout + stderr };
      } catch (err) {
        const e = err as { code?: number; stdout?: string; stderr?: string };
        return { code: e.code ?? -1, output: `${e.stdout ?? ""}${e.stderr ?? ""}` };
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** Starts the real gitea-runner with a minted `.runner` and `config` lines added; returns its stop. */
  async function startRunner(setup: string, config: string): Promise<{ output: () => string; stop: () => Promise<void> }> {
    const dir = await mkdtemp("/dev/shm/imp-gitea-runner-");
    await writeFile(join(dir, ".runner"), setup, { mode: 0o600 });
    await writeFile(join(dir, "config.yaml"), `log: {level: info}\nrunner: {file: ${dir}/.runner, fetch_interval: 1s, fetch_interval_max: 2s${config}}\ncache: {enabled: false}\nhost: {workdir_parent: ${dir}/work}\n`);
    let output = "";
    const child = spawn(GITEA_RUNNER_BIN, ["-c", join(dir, "config.yaml"), "daemon", "--once"], { env: { ...process.env, HOME: dir }, stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    return {
      output: () => output,
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) {
          const exited = once(child, "exit");
          child.kill("SIGKILL");
          await exited;
        }
        await rm(dir, { recursive: true, force: true });
      },
    };
  }

  before(async () => {
    gitea = await GiteaServer.start();
    await gitea.createOrg("acme");
    await gitea.createRepo("acme", "web");
  });
  after(async () => {
    await gitea?.stop();
  });

  it("demand is the scope's queued jobs; a minted .runner runs one real workflow job with the real runner, once", async () => {
    const f = forge();
    await gitea.putFile("acme", "web", ".gitea/workflows/ci.yml", WORKFLOW);
    const queued = await waitFor("a queued job", async () => {
      const jobs = await f.listScopeQueuedJobs();
      return jobs.length > 0 ? jobs : undefined;
    }, { timeoutMs: 30_000, intervalMs: 200 });
    assert.equal(queued.length, 1);
    assert.deepEqual(queued[0]?.labels, ["imp-linux"]);
    assert.equal(queued[0]?.repository, "acme/web");
    assert.equal(await f.jobState("acme/web", queued[0]?.id ?? 0), "queued");
    const waiting = await f.jobFacts("acme/web", queued[0]?.id ?? 0);
    assert.deepEqual(waiting, { repository: "acme/web", event: "push", branch: "main", defaultBranch: "main", fromFork: false, conclusion: "", completedAt: undefined }, "a job not yet run has no conclusion");
    assert.equal(await f.jobFacts("acme/web", 987_654), undefined, "no such job");

    const minted = await f.mint("pool-aaaaa");
    const file = JSON.parse(minted.setup.reveal()) as { uuid: string; token: string; name: string; address: string; labels: string[]; ephemeral: boolean; id: number };
    assert.equal(file.name, "pool-aaaaa");
    assert.equal(file.address, gitea.url);
    assert.deepEqual(file.labels, ["imp-linux:host"]);
    assert.equal(file.ephemeral, true);
    assert.equal(file.id, minted.runnerId);
    assert.equal(String(minted.setup), "[one-time runner setup]");
    assert.deepEqual((await f.listRunners("pool-")).map((r) => r.name), ["pool-aaaaa"]);

    const first = await runRunner(minted.setup.reveal());
    assert.equal(first.code, 0, first.output);
    const job = await gitea.job("acme", "web", queued[0]?.id ?? 0);
    assert.equal(job.status, "completed");
    assert.equal(job.conclusion, "success");
    const log = await gitea.jobLog("acme", "web", job.id);
    assert.match(log, /hello from true on Linux/, "the step's output is in the job's log on Gitea");
    assert.equal(await f.jobState("acme/web", job.id), "done");
    // The cache trust rule reads the finished job from the forge: a push to the default branch that succeeded.
    const facts = await f.jobFacts("acme/web", job.id);
    assert.ok(facts?.completedAt !== undefined && Math.abs(facts.completedAt - Date.now()) < 300_000, `completed just now: ${JSON.stringify(facts)}`);
    assert.deepEqual({ ...facts, completedAt: 0 }, { repository: "acme/web", event: "push", branch: "main", defaultBranch: "main", fromFork: false, conclusion: "success", completedAt: 0 });
    assert.deepEqual(decidePromotion({ ...facts, completedAt: facts.completedAt }, DEFAULT_PROMOTION_RULE, { fromJobCompletedAt: undefined }), { promote: true });
    assert.deepEqual(await f.listRunners("pool-"), [], "Gitea deleted the ephemeral runner after its job");

    // The same setup again: the runner's credential is dead.
    const replay = await runRunner(minted.setup.reveal());
    assert.notEqual(replay.code, 0, "a replayed .runner is refused");
    assert.match(replay.output, /unregistered runner|declare/i);
  });

  it("a registration left by a crash is removed by the next mint of that name; an unused runner is removable; the registration token is fetched once", async () => {
    const f = forge();
    const before = tokens;
    const stale = await f.mint("pool-bbbbb"); // as if the operator died before storing it
    const again = await f.mint("pool-bbbbb");
    assert.notEqual(again.runnerId, stale.runnerId);
    assert.deepEqual((await f.listRunners("pool-")).map((r) => r.id), [again.runnerId], "one registration of the name, the new one");
    assert.equal(await f.removeRunner("pool-bbbbb", again.runnerId), "done");
    assert.deepEqual(await f.listRunners("pool-"), []);
    assert.equal(await f.removeRunner("pool-bbbbb", again.runnerId), "done", "removing what is gone is done");
    assert.equal(tokens - before, 1, "one registration token served both mints (it is reusable; it stays in memory)");
    assert.equal((await gitea.api<{ token: string }>("POST", "/repos/acme/web/actions/runners/registration-token")).token.length, 40);
  });

  it("a runner mid-job that has not reported for a while is busy, though Gitea's own flag says idle: neither listed idle nor removed", async () => {
    await gitea.createRepo("acme", "quiet");
    const scope: GiteaScope = { kind: "repo", owner: "acme", repo: "quiet" };
    const f = forge(scope);
    const minted = await f.mint("quiet-ccccc");
    // A silent step and a runner that reports state once a minute: its last report ages past
    // Gitea's 10 s RunnerIdleTime mid-job, as after a Gitea restart or on a loaded node.
    const runner = await startRunner(minted.setup.reveal(), ", state_report_interval: 60s");
    try {
      await gitea.putFile("acme", "quiet", ".gitea/workflows/quiet.yml", "on: [push]\njobs:\n  quiet:\n    runs-on: imp-linux\n    steps:\n      - run: sleep 45\n");
      const raw = new GiteaClient({ baseUrl: gitea.url, token: new CredentialText(gitea.token, "token") });
      await waitFor("the job in progress", async () => (await gitea.jobs("acme", "quiet")).find((j) => j.status === "in_progress"), { timeoutMs: 60_000, intervalMs: 200 });
      await waitFor("Gitea's flag: idle mid-job", async () => ((await raw.listRunners(scope)).some((r) => r.name === "quiet-ccccc" && !r.busy) ? true : undefined), { timeoutMs: 40_000, intervalMs: 500 });
      assert.equal((await gitea.jobs("acme", "quiet")).find((j) => j.name === "quiet")?.status, "in_progress", `the job still runs:\n${runner.output().slice(-2000)}`);
      assert.deepEqual((await f.listRunners("quiet-")).map((r) => [r.name, r.busy]), [["quiet-ccccc", true]]);
      assert.equal(await f.removeRunner("quiet-ccccc", minted.runnerId), "busy");
      assert.deepEqual((await raw.listRunners(scope)).map((r) => r.name), ["quiet-ccccc"], "still registered");
    } finally {
      await runner.stop();
    }
  });
});
