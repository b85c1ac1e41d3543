import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { APP_ID, INSTALLATION_ID, startGitHub } from "./harness.ts";
import { decodeJitSetup } from "./jit-setup-format.ts";

// The GitHub test server's runner scale-set API, held to the real client and listener of
// github.com/actions/scaleset (test/github/scaleset-conformance, a Go program pinned to the
// module's v0.4.0): the whole auth chain in the GHES form (/api/v3), find-or-create, the 409 of a
// second session, the long poll with redelivery until the ack, acquirejobs, generatejitconfig and
// its "runner exists", runners by name, JobStarted/JobCompleted as the module parses them, and the
// session close and scale set delete. If the module changes what it sends or parses, this fails.

const PROBE = resolve(process.env["IMP_CACHE"] ?? resolve(import.meta.dirname, "../../.cache"), "bin/scaleset-conformance");
const REPO = { owner: "acme", repo: "web" };

interface Line {
  readonly event: string;
  readonly [key: string]: unknown;
}

test("the real actions/scaleset client and listener drive the test server's scale-set API from registration to a completed job", { timeout: 120_000 }, async (t) => {
  assert.ok(existsSync(PROBE), `${PROBE} is missing: npm run setup builds it (scripts/setup.d/36-test-tools.sh)`);
  const { server, privateKey } = await startGitHub(t, { apiPrefix: "/api/v3", actionsService: { queuePollMs: 1_000 } });
  const dir = mkdtempSync(join(tmpdir(), "imp-scaleset-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const keyFile = join(dir, "app.pem");
  writeFileSync(keyFile, privateKey, { mode: 0o600 });

  const probe = spawn(PROBE, ["-config-url", `${server.url}/${REPO.owner}/${REPO.repo}`, "-app-id", String(APP_ID), "-installation-id", String(INSTALLATION_ID), "-key", keyFile, "-name", "imp-conf", "-delete"], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  probe.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  t.after(() => probe.kill("SIGKILL"));
  const lines: Line[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: probe.stdout }).on("line", (l) => {
    lines.push(JSON.parse(l) as Line);
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise<number | null>((r) => probe.once("exit", (code) => r(code)));
  /** The first `event` line (after `after`, when given) that matches. */
  const next = async (event: string, match: (l: Line) => boolean = () => true, after?: Line): Promise<Line> => {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const from = after === undefined ? 0 : lines.indexOf(after) + 1;
      const found = lines.slice(from).find((l) => l.event === event && match(l));
      if (found !== undefined) return found;
      const fatal = lines.find((l) => l.event === "fatal");
      if (fatal !== undefined) assert.fail(`the scaleset client failed: ${JSON.stringify(fatal)}\n${stderr}`);
      if (Date.now() > deadline) assert.fail(`no "${event}" line from the scaleset client in 60 s; got ${JSON.stringify(lines)}\n${stderr}`);
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 500);
      });
    }
  };

  assert.equal((await next("found")).exists, false, "a new scope has no scale set of that name");
  const created = await next("scaleSet");
  assert.equal(created.name, "imp-conf");
  assert.equal(created.byIdName, "imp-conf");
  assert.deepEqual(created.labels, [{ type: "System", name: "imp-conf" }], "the module's default label: the name, type System");
  const session = await next("session");
  assert.match(String(session.sessionId), /^[0-9a-f-]{36}$/);
  const second = await next("secondSession");
  assert.equal(second.refused, true);
  assert.match(String(second.error), /409 Conflict.*RunnerScaleSetSessionConflictException/, "a second session is refused with the service's exception, as the module reports it");
  await next("desired", (l) => l.count === 0);

  // A plain JIT runner with the same label may not take a job the scale set acquires.
  const bystander = server.registerRunner("repo:acme/web", { name: "bystander", runner_group_id: 1, labels: ["imp-conf"] });
  const job = server.queueJob({ repo: REPO, labels: ["imp-conf"], steps: [{ name: "hello", run: "true" }] });
  await next("desired", (l) => l.count === 1, second);
  const minted = await next("minted");
  assert.equal(minted.name, "imp-conf-runner-1");
  assert.equal(minted.scaleSetId, created.id);
  const again = await next("mintedAgain");
  assert.equal(again.runnerExists, true, "a taken name is the module's RunnerExistsError (AgentExistsException)");
  const byName = await next("runnerByName");
  assert.equal(byName.id, minted.runnerId);
  assert.equal(byName.scaleSetId, created.id);
  assert.equal(job.scaleSetId, created.id, "the listener acquired the job for its scale set");

  // The minted runner comes online with its one-time setup and takes the job; the bystander cannot.
  const base = `${server.url}/_imp-test/runner`;
  const post = async (path: string, body?: unknown): Promise<{ status: number; body: unknown }> => {
    const r = await fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    const text = await r.text();
    return { status: r.status, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
  };
  const other = await post("/sessions", { runnerId: bystander.runner.id, runnerName: "bystander", secret: bystander.runner.secret });
  assert.equal((await post(`/sessions/${(other.body as { sessionId: string }).sessionId}/acquire?waitSeconds=1`)).status, 204, "a runner outside the scale set never gets its job");
  const setup = decodeJitSetup(String(minted.encodedJITConfig));
  const opened = await post("/sessions", { runnerId: setup.runner.AgentId, runnerName: setup.runner.AgentName, secret: setup.credentials.Data.secret });
  assert.equal(opened.status, 201);
  const sessionId = (opened.body as { sessionId: string }).sessionId;
  const acquired = await post(`/sessions/${sessionId}/acquire?waitSeconds=5`);
  assert.equal(acquired.status, 200);
  assert.equal((acquired.body as { job: { id: number } }).job.id, job.id);
  const started = await next("jobStarted");
  assert.equal(started.runnerName, "imp-conf-runner-1");
  assert.equal(started.runnerRequestId, job.id);
  assert.equal(started.jobId, String(job.id), "jobId is a string in the module's JobMessageBase");
  assert.deepEqual(started.labels, ["imp-conf"]);
  assert.equal(started.repository, "web");
  assert.equal(started.owner, "acme");
  assert.equal((await post(`/sessions/${sessionId}/jobs/${job.id}/result`, { conclusion: "success", steps: [{ name: "hello", exitCode: 0 }], log: "" })).status, 204);
  const completed = await next("jobCompleted");
  assert.equal(completed.runnerName, "imp-conf-runner-1");
  assert.equal(completed.result, "succeeded");
  await next("desired", (l) => l.count === 0, completed);

  // Every message was acknowledged after the module saw it: nothing is left to redeliver.
  const scaleSet = server.actions.scaleSets.get(Number(created.id));
  assert.ok(scaleSet !== undefined);
  assert.deepEqual(scaleSet.messages, [], "each message the listener handled was deleted (acknowledged)");
  const polls = server.requestsTo(/^\/_services\/queue\/[\w-]+$/, "GET");
  assert.ok(polls.some((r) => r.status === 202) && polls.some((r) => r.status === 200), "the long poll answered both 202 (nothing) and 200 (a message)");

  probe.kill("SIGTERM");
  const stopped = await next("stopped");
  assert.equal(stopped.canceled, true, `the listener ended by its context, not an error: ${String(stopped.runError)}`);
  assert.equal(stopped.closeError, "<nil>", "the session closed with 204");
  assert.equal((await next("deleted")).error, "<nil>", "the scale set deleted with 204");
  assert.equal(await exited, 0);
  assert.equal(server.actions.scaleSets.size, 0, "nothing is left registered");
  // The REST half of the chain stayed within GitHub's OpenAPI description (startGitHub checks violations).
  assert.equal(server.requestsTo(/\/actions\/runners\/registration-token$/, "POST").length, 1, "one registration token bought the admin token for the whole run");
});
