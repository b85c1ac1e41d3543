/**
 * The Gitea forge (src/forge/gitea) against a real Gitea 1.27.3, with the real gitea-runner v1.0.8
 * run on this host from the `.runner` file the forge minted: the one-time setup works with the
 * real runner exactly once, a replayed one is refused, a registration left by a crash is cleaned
 * up by the next mint, an unused runner is removable, and demand is the scope's queued jobs.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { GiteaClient, GiteaForge, type GiteaScope } from "../../../src/forge/index.ts";
import { CredentialText } from "../../../src/github/index.ts";
import { waitFor } from "../../../src/shared/index.ts";
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
  const scope: GiteaScope = { kind: "repo", owner: "acme", repo: "web" };
  let tokens = 0;
  const forge = (): GiteaForge => {
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
});
