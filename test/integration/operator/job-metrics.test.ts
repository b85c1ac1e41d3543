/**
 * What a person sees of one CI job, on a real API server with the operator and the GitHub test
 * server: the ARC-named job metrics and Imp's per-step histograms on the operator's /metrics, the
 * JobStarted / JobCompleted Events on the ImpVM, status.setup.mintedAt, and the job's timeline.
 * The test plays scheduler, agent and runner: it binds the VM, opens the sealed setup with the
 * node's key, writes the agent's status, and speaks the test server's runner protocol (which sends
 * the in_progress and completed webhooks, the first of them twice with one delivery id).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { API_VERSION, GITHUB_APP_SECRET_KEYS, LABELS, SETUP_SEAL_SUITE, generateNodeKeyPair, openSetup, parseSealedSetup, type ImpNode, type ImpVM, type ImpVMRunnerPool, type NodeKeyPair, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, EVENT_RESOURCE, type CoreEvent, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { findReplacement, IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, jobTimeline, formatJobTimeline, Operator, SECRETS, WEBHOOK_PATH, type SecretObject } from "../../../src/operator/index.ts";
import { createLogger, waitFor } from "../../../src/shared/index.ts";
import { APP_ID, INSTALLATION_ID, startGitHub } from "../../github/harness.ts";
import { decodeJitSetup } from "../../github/jit-setup-format.ts";

const NS = "default";
const REPO = { owner: "acme", repo: "web" };
const WEBHOOK_SECRET = "job-metrics-webhook-secret";
const WAIT = { timeoutMs: 90_000, intervalMs: 100 };

/** One sample of the Prometheus text at `url`, matching name and every given label. */
async function scrape(url: string, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const text = await (await fetch(url)).text();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m?.[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
}

describe("operator: a job's metrics, Events and timeline", { timeout: 600_000 }, () => {
  let plane: ControlPlane;
  let operator: Operator;
  const stop = new AbortController();
  let running: Promise<void>;
  let vms: ResourceClient<ImpVM>;
  let events: ResourceClient<CoreEvent>;
  let secrets: ResourceClient<SecretObject>;
  let nodeKey: NodeKeyPair;
  let webhookUrl: string;
  let metricsUrl: string;

  before(async () => {
    plane = await startControlPlane();
    await installCrds(plane.kubeConfig, buildAllCrds());
    vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
    events = createResourceClient<CoreEvent>(plane.kubeConfig, EVENT_RESOURCE);
    secrets = createResourceClient<SecretObject>(plane.kubeConfig, SECRETS);
    const nodes = createResourceClient<ImpNode>(plane.kubeConfig, IMP_NODES);
    nodeKey = await generateNodeKeyPair();
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-a" }, spec: { unschedulable: false } });
    await nodes.patchStatus({ name: "node-a" }, { status: { setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: nodeKey.keyId, publicKey: nodeKey.publicKey } } });
    operator = new Operator({
      kubeConfig: plane.kubeConfig,
      logger: createLogger({ level: process.env["IMP_TEST_LOG"] ?? "warn", name: "operator" }),
      identity: "job-metrics-test",
      scheduler: false,
      nodeLoss: false,
      healthPort: 0,
      webhookPort: 0,
      webhookHost: "127.0.0.1",
      webhookSecrets: [WEBHOOK_SECRET],
      runnerListIntervalMs: 1_000,
      githubClientOptions: { serverErrorBackoffMs: 50 },
    });
    running = operator.start(stop.signal);
    running.catch(() => undefined);
    webhookUrl = `${await operator.webhook!.listening()}${WEBHOOK_PATH}`;
    metricsUrl = `${await operator.health!.listening()}/metrics`;
  });

  after(async () => {
    stop.abort();
    await running?.catch(() => undefined);
    await plane?.stop();
  });

  it("one job on one runner VM: ARC's metrics once each, the VM's steps, two Events, and the whole timeline with its replacement", async (t) => {
    const gh = await startGitHub(t);
    const b64 = (s: string): string => Buffer.from(s).toString("base64");
    await secrets.create({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "jobs-app", namespace: NS },
      data: { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(gh.privateKey) },
    });
    const pools = createResourceClient<ImpVMRunnerPool>(plane.kubeConfig, IMP_VM_RUNNER_POOLS);
    await pools.create({
      apiVersion: API_VERSION,
      kind: "ImpVMRunnerPool",
      metadata: { name: "jobs", namespace: NS },
      spec: {
        templateName: "runner",
        github: { credentialsSecretRef: { name: "jobs-app" }, apiURL: gh.server.url, scope: "repo", repository: `${REPO.owner}/${REPO.repo}`, runnerGroup: "Default", labels: ["imp", "jobs"] },
        minIdle: 1,
        maxConcurrent: 2,
        scaleUpStep: 5,
        runnerCommand: ["/runner/run.sh", "--ephemeral"],
      },
    });
    const vm = await waitFor("a VM of pool jobs", async () => (await vms.list({ namespace: NS, labelSelector: `${LABELS.pool}=jobs` })).items[0], WAIT);
    const name = vm.metadata.name ?? "";
    const ref = { namespace: NS, name };

    // The scheduler's part: bind. The operator mints the setup and says when.
    const boundAt = Date.now();
    await vms.patchStatus(ref, { status: { phase: "Scheduled", nodeName: "node-a", phaseTimestamps: { pending: new Date(boundAt - 50).toISOString(), scheduled: new Date(boundAt).toISOString() } } });
    const minted = await waitFor(`setup of ${name} minted`, async () => {
      const v = await vms.get(ref);
      return v.status?.setup?.state === "Minted" ? v : undefined;
    }, WAIT);
    const mintedAt = Date.parse(minted.status?.setup?.mintedAt ?? "");
    assert.ok(mintedAt >= boundAt - 1_000 && mintedAt <= Date.now(), `status.setup.mintedAt ${minted.status?.setup?.mintedAt} is when the mint happened`);

    // The agent's part: prepare, boot, deliver the setup (the runner's credentials come from it).
    const plain = Buffer.from(await openSetup(parseSealedSetup(minted.status?.setup?.sealed ?? ""), nodeKey, vm.metadata.uid ?? "")).toString("utf8");
    const setup = decodeJitSetup(plain);
    // As the agent writes them: booting = preparing + prepareDurationMs; the guest answers bootDurationMs later.
    const t0 = Date.now();
    const at = (offsetMs: number): string => new Date(t0 + offsetMs).toISOString();
    await vms.patchStatus(ref, { status: { phase: "Preparing", phaseTimestamps: { preparing: at(0) } } });
    await vms.patchStatus(ref, { status: { phase: "Booting", prepareDurationMs: 120, phaseTimestamps: { booting: at(120) } } });
    await vms.patchStatus(ref, { status: { phase: "Running", bootDurationMs: 340, phaseTimestamps: { running: at(460) }, setup: { state: "Delivered", deliveredAt: at(470) } } });
    await new Promise((r) => setTimeout(r, 500)); // those points are now past

    // The runner's part, over the test server's runner protocol; GitHub's webhooks go to the operator.
    gh.server.webhooks.target = { url: webhookUrl, secret: WEBHOOK_SECRET };
    const job = gh.server.queueJob({ repo: REPO, labels: ["self-hosted", "imp", "jobs"], steps: [{ name: "build", run: "true" }], name: "build" });
    const test = `${gh.server.url}/_imp-test`;
    const post = async (path: string, body: unknown): Promise<Response> => fetch(`${test}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const session = (await (await post("/runner/sessions", { runnerId: setup.runner.AgentId, runnerName: name, secret: setup.credentials.Data.secret })).json()) as { sessionId: string };
    gh.server.webhooks.duplicateNext = 1; // in_progress arrives twice with one delivery id
    const acquired = await post(`/runner/sessions/${session.sessionId}/acquire?waitSeconds=10`, {});
    assert.equal(acquired.status, 200);
    await acquired.arrayBuffer();
    await new Promise((r) => setTimeout(r, 1_100)); // GitHub's times have whole seconds: let the job run for at least one
    const completed = await post(`/runner/sessions/${session.sessionId}/jobs/${job.id}/result`, { conclusion: "success", steps: [{ name: "build", exitCode: 0 }], log: "ok\n" });
    assert.equal(completed.status, 204);
    await gh.server.webhooks.settled();
    assert.deepEqual(gh.server.webhooks.sent.map((s) => [s.action, s.status]), [["queued", 202], ["in_progress", 202], ["in_progress", 200], ["completed", 202]], "the repeat was acknowledged as a duplicate");

    const job_ = { organization: REPO.owner, repository: REPO.repo, job_name: "build", event_name: "", enterprise: "", actions_github_com_scale_set_name: "jobs", actions_github_com_scale_set_namespace: NS };
    assert.equal(await scrape(metricsUrl, "gha_started_jobs_total", job_), 1);
    assert.equal(await scrape(metricsUrl, "gha_completed_jobs_total", { ...job_, job_result: "succeeded" }), 1);
    assert.equal(await scrape(metricsUrl, "gha_job_startup_duration_seconds_count", job_), 1);
    assert.equal(await scrape(metricsUrl, "gha_job_execution_duration_seconds_count", { ...job_, job_result: "succeeded" }), 1);
    const github = gh.server.jobs.get(job.id);
    assert.ok(github?.startedAt !== undefined && github.completedAt !== undefined);
    const whole = (ms: number): number => Math.floor(ms / 1000) * 1000;
    assert.equal(await scrape(metricsUrl, "gha_job_startup_duration_seconds_sum", job_), (whole(github.startedAt) - whole(github.queuedAt)) / 1000, "created_at → started_at, as the webhook says");
    assert.equal(await scrape(metricsUrl, "gha_job_execution_duration_seconds_sum", { ...job_, job_result: "succeeded" }), (whole(github.completedAt) - whole(github.startedAt)) / 1000);
    assert.equal(await scrape(metricsUrl, "gha_job_execution_duration_seconds_bucket", { ...job_, job_result: "succeeded", le: "3600" }), 1, "ARC's largest bucket");
    for (const step of ["vm_bound", "setup_minted", "disk_ready", "booted", "setup_delivered"]) {
      assert.equal(await scrape(metricsUrl, "imp_job_step_duration_seconds_count", { namespace: NS, pool: "jobs", step }), 1, `step ${step} observed once`);
    }
    assert.equal(await scrape(metricsUrl, "imp_job_step_duration_seconds_sum", { namespace: NS, pool: "jobs", step: "booted" }), 0.34);
    assert.equal(await scrape(metricsUrl, "imp_operator_leader", {}), 1, "the one replica leads (its controllers minted and observed all of the above)");
    assert.equal(await scrape(metricsUrl, "gha_min_runners", { name: "jobs", namespace: NS }), 1);
    assert.equal(await scrape(metricsUrl, "gha_max_runners", { name: "jobs", namespace: NS }), 2);

    const onVm = await waitFor("JobStarted and JobCompleted on the ImpVM", async () => {
      const list = (await events.list({ namespace: NS })).items.filter((e) => e.involvedObject.kind === "ImpVM" && e.involvedObject.name === name && e.reason.startsWith("Job"));
      return list.length >= 2 ? list : undefined;
    }, WAIT);
    assert.deepEqual(onVm.map((e) => [e.reason, e.count]).sort(), [["JobCompleted", 1], ["JobStarted", 1]]);
    assert.equal(onVm[0]?.involvedObject.uid, vm.metadata.uid);
    assert.match(onVm.find((e) => e.reason === "JobCompleted")?.message ?? "", /Job "build" of acme\/web .* completed: success/);

    // The VM ends and is cleaned up: the last step; then the timeline has every point of this VM.
    // (The pool deletes an ended VM soon: keep the object as written.)
    const ended = await vms.patchStatus(ref, { status: { phase: "Succeeded", exitCode: 0, phaseTimestamps: { succeeded: new Date().toISOString() }, teardown: { processGone: true, resourcesReleased: true, completedAt: new Date(Date.now() + 5).toISOString() } } });
    await waitFor("step cleaned observed", async () => ((await scrape(metricsUrl, "imp_job_step_duration_seconds_count", { namespace: NS, pool: "jobs", step: "cleaned" })) === 1 ? true : undefined), WAIT);
    // The pool replaced the busy runner (busy 1 + minIdle 1); it comes online as the first one did.
    const next = await waitFor("the replacement VM", async () => (await vms.list({ namespace: NS, labelSelector: `${LABELS.pool}=jobs` })).items.find((v) => v.metadata.name !== name), WAIT);
    const nextRef = { namespace: NS, name: next.metadata.name ?? "" };
    await vms.patchStatus(nextRef, { status: { phase: "Scheduled", nodeName: "node-a", phaseTimestamps: { scheduled: new Date().toISOString() } } });
    await waitFor("replacement minted", async () => ((await vms.get(nextRef)).status?.setup?.state === "Minted" ? true : undefined), WAIT);
    await vms.patchStatus(nextRef, { status: { phase: "Running", phaseTimestamps: { running: new Date().toISOString() }, setup: { state: "Delivered", deliveredAt: new Date().toISOString() } } });
    await waitFor("the replacement's runner ready", async () => ((await scrape(metricsUrl, "imp_job_runner_ready_seconds_count", { namespace: NS, pool: "jobs" })) === 2 ? true : undefined), WAIT);
    const replacement = findReplacement(ended, (await vms.list({ namespace: NS })).items, github.startedAt);
    assert.equal(replacement?.metadata.name, nextRef.name);
    const timeline = jobTimeline(ended, { queuedAt: github.queuedAt, startedAt: github.startedAt, completedAt: github.completedAt }, replacement);
    t.diagnostic(formatJobTimeline(timeline).join("\n"));
    assert.deepEqual(timeline.missing, []);
    assert.equal(timeline.warm, true, "the runner was online before the job was queued");
    assert.equal(timeline.startupMs, github.startedAt - github.queuedAt);
    await pools.delete({ namespace: NS, name: "jobs" });
  });
});
