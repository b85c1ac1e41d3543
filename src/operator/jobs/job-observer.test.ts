import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, LABELS, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import type { WorkflowJobEvent } from "../../forge/index.ts";
import { EVENT_RESOURCE, EventRecorder, FakeResourceClient, Informer, type CoreEvent } from "../../kube/index.ts";
import { FakeClock, silentLogger } from "../../shared/index.ts";
import { IMP_VM_RUNNER_POOLS, IMP_VMS } from "../pools/index.ts";
import { JobObserver } from "./job-observer.ts";

// Transcribed from actions-runner-controller cmd/ghalistener/metrics/metrics.go (defaultRuntimeBuckets
// and the default label sets of defaultMetrics), independently of the constants under test.
const ARC_BUCKETS = [
  "0.01", "0.05", "0.1", "0.5", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "12", "15", "18", "20", "25", "30", "40", "50", "60", "70", "80", "90", "100",
  "110", "120", "150", "180", "210", "240", "300", "360", "420", "480", "540", "600", "900", "1200", "1800", "2400", "3000", "3600", "+Inf",
];
const ARC_STARTED_LABELS = ["enterprise", "event_name", "job_name", "organization", "repository"];
const ARC_COMPLETED_LABELS = [...ARC_STARTED_LABELS, "job_result"].sort();
const SCALE_SET = ["actions_github_com_scale_set_name", "actions_github_com_scale_set_namespace"];

interface Sample {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

/** The registry's exposition text, as Prometheus scrapes it, parsed into samples. */
async function scrape(registry: Registry): Promise<Sample[]> {
  const text = await registry.metrics();
  return text
    .split("\n")
    .filter((l) => l !== "" && !l.startsWith("#"))
    .map((line) => {
      const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      assert.ok(m, line);
      const labels = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1] ?? "", x[2] ?? ""]));
      return { name: m[1] ?? "", labels, value: Number(m[3]) };
    });
}

const only = (samples: Sample[], name: string, where: Record<string, string> = {}): Sample[] =>
  samples.filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v));
const value = (samples: Sample[], name: string, where: Record<string, string> = {}): number | undefined => only(samples, name, where)[0]?.value;

const T0 = Date.UTC(2026, 11, 3, 8, 0, 0);
const iso = (ms: number): string => new Date(ms).toISOString();

const pool: ImpVMRunnerPool = {
  apiVersion: API_VERSION,
  kind: "ImpVMRunnerPool",
  metadata: { name: "p", namespace: "ns" },
  spec: {
    templateName: "runner",
    github: { credentialsSecretRef: { name: "app" }, apiURL: "http://127.0.0.1:9", scope: "repo", repository: "acme/web", runnerGroup: "Default", labels: ["imp"] },
    minIdle: 1,
    maxConcurrent: 4,
    scaleUpStep: 5,
    runnerCommand: ["/runner/run.sh"],
  },
  status: { desired: 2, idle: 1, busy: 1 },
};

function runnerVm(name: string, status: ImpVM["status"]): ImpVM {
  return { apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: "ns", labels: { [LABELS.pool]: "p" } }, spec: { templateRef: { name: "runner" }, lifecycle: "ephemeral" }, ...(status === undefined ? {} : { status }) };
}

let delivery = 0;
function jobEvent(action: WorkflowJobEvent["action"], over: Partial<WorkflowJobEvent> = {}): WorkflowJobEvent {
  return {
    deliveryId: `d-${++delivery}`,
    action,
    jobId: 41,
    runId: 7,
    runAttempt: 1,
    jobName: "build",
    labels: ["imp"],
    runnerName: action === "queued" ? null : "p-abcde",
    runnerId: action === "queued" ? null : 3,
    runnerGroupName: null,
    conclusion: action === "completed" ? "success" : null,
    repository: { owner: "acme", name: "web", fullName: "acme/web" },
    organization: "acme",
    enterprise: "big-corp",
    installationId: 1,
    createdAt: T0,
    startedAt: T0 + 3_000,
    ...(action === "completed" ? { completedAt: T0 + 15_000 } : {}),
    ...over,
  };
}

describe("JobObserver", () => {
  const stop = new AbortController();
  const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
  const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
  const events = new FakeResourceClient<CoreEvent>(EVENT_RESOURCE);
  const registry = new Registry();
  const clock = new FakeClock(T0 - 60_000);
  let observer: JobObserver;
  let vmCache: Informer<ImpVM>;

  before(async () => {
    // Creating drops the status (a subresource), as the API server does.
    await pools.create(pool);
    await pools.patchStatus({ namespace: "ns", name: "p" }, { status: pool.status ?? {} });
    for (const vm of [
      runnerVm("p-abcde", { phase: "Running", nodeName: "n1", setup: { state: "Delivered" } }),
      // A VM from before the operator started: its steps must not be counted again on a restart.
      runnerVm("p-old00", { phase: "Succeeded", exitCode: 0, nodeName: "n1", phaseTimestamps: { pending: iso(T0 - 600_000), scheduled: iso(T0 - 599_000) } }),
    ]) {
      await vms.create(vm);
      await vms.patchStatus({ namespace: "ns", name: vm.metadata.name ?? "" }, { status: vm.status ?? {} });
    }
    vmCache = new Informer({ client: vms });
    const poolCache = new Informer({ client: pools });
    observer = new JobObserver({ vmCache, poolCache, recorder: new EventRecorder({ client: events, component: "imp-operator", instance: "test" }), registry, logger: silentLogger, clock });
    void vmCache.start(stop.signal);
    void poolCache.start(stop.signal);
    await Promise.all([vmCache.waitForSync(stop.signal), poolCache.waitForSync(stop.signal)]);
  });
  after(() => stop.abort());

  it("observes ARC's job histograms and counters, with ARC's names, label names and buckets, once per job", async () => {
    observer.onWorkflowJob(jobEvent("queued"));
    observer.onWorkflowJob(jobEvent("in_progress"));
    observer.onWorkflowJob(jobEvent("in_progress")); // redelivered under a new delivery id
    observer.onWorkflowJob(jobEvent("completed"));
    observer.onWorkflowJob(jobEvent("completed"));
    observer.onWorkflowJob(jobEvent("in_progress")); // late and out of order
    const s = await scrape(registry);

    const startupBuckets = only(s, "gha_job_startup_duration_seconds_bucket");
    assert.deepEqual(startupBuckets.map((b) => b.labels["le"]), ARC_BUCKETS);
    assert.deepEqual(only(s, "gha_job_execution_duration_seconds_bucket").map((b) => b.labels["le"]), ARC_BUCKETS);
    const labelNames = (name: string): string[] => Object.keys(only(s, name)[0]?.labels ?? {}).filter((k) => !SCALE_SET.includes(k)).sort();
    assert.deepEqual(labelNames("gha_started_jobs_total"), ARC_STARTED_LABELS);
    assert.deepEqual(labelNames("gha_job_startup_duration_seconds_count"), ARC_STARTED_LABELS);
    assert.deepEqual(labelNames("gha_completed_jobs_total"), ARC_COMPLETED_LABELS);
    assert.deepEqual(labelNames("gha_job_execution_duration_seconds_count"), ARC_COMPLETED_LABELS);

    const job = { organization: "acme", repository: "web", job_name: "build", event_name: "", enterprise: "", actions_github_com_scale_set_name: "p", actions_github_com_scale_set_namespace: "ns" };
    assert.equal(value(s, "gha_started_jobs_total", job), 1);
    assert.equal(value(s, "gha_completed_jobs_total", { ...job, job_result: "succeeded" }), 1);
    assert.equal(value(s, "gha_job_startup_duration_seconds_count", job), 1);
    assert.equal(value(s, "gha_job_startup_duration_seconds_sum", job), 3, "created_at → started_at");
    assert.equal(value(s, "gha_job_startup_duration_seconds_bucket", { ...job, le: "2" }), 0);
    assert.equal(value(s, "gha_job_startup_duration_seconds_bucket", { ...job, le: "3" }), 1);
    assert.equal(value(s, "gha_job_execution_duration_seconds_sum", { ...job, job_result: "succeeded" }), 12, "started_at → completed_at");
  });

  it("records JobStarted and JobCompleted on the job's ImpVM, once each", async () => {
    await observer.settled();
    const recorded = (await events.list({ namespace: "ns" })).items.filter((e) => e.involvedObject.name === "p-abcde");
    assert.deepEqual(recorded.map((e) => [e.reason, e.count]).sort(), [["JobCompleted", 1], ["JobStarted", 1]]);
    const startedEvent = recorded.find((e) => e.reason === "JobStarted");
    assert.match(startedEvent?.message ?? "", /Job "build" of acme\/web \(run 7, attempt 1, job 41\) started on runner p-abcde; 3\.0 s after it was queued/);
    assert.match(recorded.find((e) => e.reason === "JobCompleted")?.message ?? "", /completed: success; 12 s on the runner/);
    assert.equal(startedEvent?.involvedObject.kind, "ImpVM");
  });

  it("counts a completed job whose in_progress was lost as started too; ignores runners that are no ImpVM, jobs cancelled before any runner took them and deliveries another pool's secret signed", async () => {
    observer.onWorkflowJob(jobEvent("completed", { jobId: 42, conclusion: "failure" }));
    observer.onWorkflowJob(jobEvent("in_progress", { jobId: 43, runnerName: "someone-elses-runner" }));
    observer.onWorkflowJob(jobEvent("completed", { jobId: 43, runnerName: "someone-elses-runner" }));
    observer.onWorkflowJob(jobEvent("in_progress", { jobId: 44 }), new Set(["ns/other-pool"])); // signed by another pool's secret
    // Cancelled while queued: completed with no runner ran nothing on an Imp runner, so it counts nowhere.
    observer.onWorkflowJob(jobEvent("completed", { jobId: 45, runnerName: null, runnerId: null, conclusion: "cancelled" }));
    const s = await scrape(registry);
    const job = { repository: "web", job_name: "build" };
    assert.equal(only(s, "gha_started_jobs_total", job).reduce((n, x) => n + x.value, 0), 2);
    assert.equal(value(s, "gha_completed_jobs_total", { ...job, job_result: "failed" }), 1);
    assert.equal(only(s, "gha_completed_jobs_total").reduce((n, x) => n + x.value, 0), 2);
  });

  it("shows each pool as ARC's scale-set gauges", async () => {
    const s = await scrape(registry);
    const set = { name: "p", namespace: "ns", repository: "web", organization: "acme", enterprise: "", actions_github_com_scale_set_name: "p" };
    assert.equal(value(s, "gha_min_runners", set), 1);
    assert.equal(value(s, "gha_max_runners", set), 4);
    assert.equal(value(s, "gha_desired_runners", set), 2);
    assert.equal(value(s, "gha_idle_runners", set), 1);
    assert.equal(value(s, "gha_busy_runners", set), 1);
    assert.equal(value(s, "gha_registered_runners", set), 2);
    assert.equal(value(s, "gha_running_jobs", set), 1);
  });

  it("observes each VM step once, as its status gains it, and nothing that ended before it started", async () => {
    const name = "p-fresh";
    const created = await vms.create(runnerVm(name, { phase: "Pending", phaseTimestamps: { pending: iso(T0) } }));
    const ref = { namespace: "ns", name };
    const waitCache = async (pred: (vm: ImpVM | undefined) => boolean): Promise<void> => {
      for (let i = 0; i < 500 && !pred(vmCache.get(`ns/${name}`) as ImpVM | undefined); i++) await new Promise((r) => setTimeout(r, 5));
    };
    await vms.patchStatus(ref, { status: { phase: "Scheduled", nodeName: "n1", phaseTimestamps: { pending: iso(T0), scheduled: iso(T0 + 200) } } });
    await vms.patchStatus(ref, { status: { setup: { state: "Minted", mintedAt: iso(T0 + 900) } } });
    await vms.patchStatus(ref, {
      status: { phase: "Running", phaseTimestamps: { preparing: iso(T0 + 300), booting: iso(T0 + 700), running: iso(T0 + 1_500) }, prepareDurationMs: 400, bootDurationMs: 600, setup: { state: "Delivered", deliveredAt: iso(T0 + 1_500) } },
    });
    await vms.patchStatus(ref, { status: { phase: "Running", bootDurationMs: 600 } }); // an update that adds nothing
    await waitCache((vm) => vm?.status?.setup?.deliveredAt !== undefined);
    await vms.patchStatus(ref, { status: { phase: "Succeeded", exitCode: 0, phaseTimestamps: { succeeded: iso(T0 + 20_000) }, teardown: { processGone: true, resourcesReleased: true, completedAt: iso(T0 + 20_250) } } });
    await waitCache((vm) => vm?.status?.teardown?.completedAt !== undefined);
    const s = await scrape(registry);
    const step = (st: string): [number | undefined, number | undefined] => [
      value(s, "imp_job_step_duration_seconds_count", { pool: "p", namespace: "ns", step: st }),
      value(s, "imp_job_step_duration_seconds_sum", { pool: "p", namespace: "ns", step: st }),
    ];
    assert.deepEqual(step("vm_bound"), [1, 0.2]);
    assert.deepEqual(step("setup_minted"), [1, 0.7]);
    assert.deepEqual(step("disk_ready"), [1, 0.5], "bound (T0+200) → preparing + prepareDurationMs (T0+700)");
    assert.deepEqual(step("booted"), [1, 0.6]);
    assert.deepEqual(step("setup_delivered"), [1, 0.2], "max(booted T0+1300, minted T0+900) → delivered T0+1500");
    assert.deepEqual(step("cleaned"), [1, 0.25]);
    assert.equal(value(s, "imp_job_runner_ready_seconds_count", { pool: "p" }), 1);
    assert.equal(value(s, "imp_job_runner_ready_seconds_sum", { pool: "p" }), 1.5);
    assert.ok(created.metadata.uid !== undefined);
  });
});
