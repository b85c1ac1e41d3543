/**
 * A hostile job on the real runner path, with the node as a platform team installs it (egress
 * `internet`, no blocked ranges configured): what it can reach of the node's networks, and what it
 * can take of its runner's one-time setup (docs/agent.md, "What a job can read of its runner's setup").
 *
 * Egress: public unicast only. This world's forge (the GitHub test server) stands on a non-public
 * address, which each node allow-lists by its one port; every other listener there — the operator's
 * webhook port on the same address, a listener on the other node's address, the API server — is
 * refused, although each answers from the host.
 *
 * The setup: A job runs as its runner's user, so it can read its
 * runner's environment (/proc/$PPID/environ): with delivery `Environment` (what GitHub's runner
 * needs) the setup is there; with `Stdin` it is in no environment. Either way, what the setup buys
 * is nothing: a second runner session with it is refused while the job runs (the setup was used),
 * and after the job (the runner is gone) — as GitHub refuses a used JIT config.
 */
import assert from "node:assert/strict";
import { createConnection, createServer, type Server } from "node:net";
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

describe("a hostile job: what it reaches of the node's networks, and what its runner's setup buys it", { skip: unavailable, timeout: 900_000 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start();
  });
  after(async () => {
    const left = await world?.dispose();
    assert.deepEqual(left ?? [], [], "nothing of the world is left on the host");
  });

  it("a job reaches its forge's one allowed port and nothing else of the nodes' networks, the API server included", async () => {
    const [first, second] = world.sim.nodes;
    assert.ok(first !== undefined && second !== undefined);
    const forge = new URL(world.github.url);
    const webhookPort = new URL(world.webhookUrl).port;
    const api = new URL(world.plane.server);
    // Listeners where a job must not reach, each answering from the host (the controls).
    const servers: Server[] = [];
    const listen = (host: string): Promise<number> =>
      new Promise((resolve, reject) => {
        const server = createServer((c) => c.on("error", () => undefined).end("control\n")).listen(0, host, () => resolve((server.address() as { port: number }).port));
        server.once("error", reject);
        servers.push(server);
      });
    try {
      const otherNodePort = await listen(second.hostAddress);
      const targets: Record<string, string> = {
        "the operator's webhook port, beside the forge": `${forge.hostname}:${webhookPort}`,
        "a listener at the other node's address": `${second.hostAddress}:${otherNodePort}`,
        "the other node's own uplink address": `${second.uplinkAddress}:${forge.port}`,
        "the API server on loopback": `127.0.0.1:${api.port}`,
        "the API server's port on the forge's address": `${forge.hostname}:${api.port}`,
      };
      for (const target of [`${second.hostAddress}:${otherNodePort}`, `${forge.hostname}:${webhookPort}`]) {
        const [host = "", port = ""] = target.split(":");
        assert.ok(await tcpAnswers(host, Number(port)), `control: ${target} answers from the host`);
      }
      const probe = (target: string): string => `if nc -w 3 ${target.replace(":", " ")} </dev/null >/dev/null 2>&1; then echo "probe ${target} reached"; else echo "probe ${target} refused"; fi`;
      const steps = [{ name: "probe", run: [probe(`${forge.hostname}:${forge.port}`), ...Object.values(targets).map(probe)].join("\n") }];
      await world.applyPool("egress-pool", { minIdle: 1, maxConcurrent: 1, labels: ["self-hosted", "imp", "egress"] });
      const job = world.queueJob("egress-probe", steps, ["self-hosted", "imp", "egress"]);
      await world.waitForJob(job, "completed");
      const log = job.result?.log ?? "";
      assert.equal(job.conclusion, "success", log);
      assert.match(log, new RegExp(`probe ${forge.hostname}:${forge.port} reached`), `the forge's allowed port (the control from inside):\n${log}`);
      for (const [what, target] of Object.entries(targets)) assert.match(log, new RegExp(`probe ${target} refused`), `${what} (${target}):\n${log}`);
    } finally {
      for (const server of servers) server.close();
    }
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

/** Whether a TCP connection to host:port is accepted (from the host). */
function tcpAnswers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port, timeout: 3_000 });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
  });
}
