import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, FINALIZERS, LABELS, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import type { WorkflowJobEvent } from "../../forge/index.ts";
import { EVENT_RESOURCE, EventRecorder, FakeResourceClient, Informer, labelIndex, type CoreEvent } from "../../kube/index.ts";
import { FakeClock, silentLogger, waitFor } from "../../shared/index.ts";
import { PoolForges } from "../forges/index.ts";
import type { JobState, PoolForge } from "../../forge/index.ts";
import { PoolController } from "./pool-controller.ts";
import { IMP_VM_RUNNER_POOLS, IMP_VMS, SECRETS, type SecretObject } from "../resources.ts";

const pool: ImpVMRunnerPool = {
  apiVersion: API_VERSION,
  kind: "ImpVMRunnerPool",
  metadata: { name: "p", namespace: "ns" },
  spec: {
    templateName: "runner",
    github: { credentialsSecretRef: { name: "app" }, apiURL: "http://127.0.0.1:9", scope: "repo", repository: "acme/web", runnerGroup: "Default", labels: ["imp"] },
    minIdle: 2,
    maxConcurrent: 4,
    scaleUpStep: 5,
    runnerCommand: ["/runner/run.sh"],
  },
};

async function reconciles(registry: Registry): Promise<number> {
  const metric = await registry.getSingleMetric("imp_controller_reconcile_total")?.get();
  return (metric?.values ?? []).reduce((n, v) => n + v.value, 0);
}

describe("PoolController", () => {
  it("does not over-create while its VM cache is stale, and not after it catches up", async () => {
    const stop = new AbortController();
    const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const created = await pools.create(pool);
    const poolCache = new Informer({ client: pools });
    const vmCache = new Informer({ client: vms });
    vmCache.addIndex("imp-operator/vm-by-pool", labelIndex(LABELS.pool));
    void poolCache.start(stop.signal);
    await poolCache.waitForSync(stop.signal);
    const registry = new Registry();
    const controller = new PoolController({
      pools,
      vms,
      poolCache,
      vmCache, // not started: it never sees the VMs the controller creates
      forges: new PoolForges({ secrets: new FakeResourceClient<SecretObject>(SECRETS), logger: silentLogger }),
      recorder: new EventRecorder({ client: new FakeResourceClient<CoreEvent>(EVENT_RESOURCE), component: "test", instance: "test" }),
      registry,
      logger: silentLogger,
    });
    const running = controller.controller.start(stop.signal);
    try {
      for (let round = 1; round <= 4; round++) {
        controller.controller.enqueue("ns/p");
        await waitFor(`reconcile ${round}`, async () => ((await reconciles(registry)) >= round ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
      }
      let list = (await vms.list({ namespace: "ns" })).items;
      assert.equal(list.length, 2, "four reconciles on a stale cache created minIdle VMs once");
      for (const vm of list) {
        assert.equal(vm.metadata.labels?.[LABELS.pool], "p");
        assert.match(vm.metadata.name ?? "", /^p-[a-z0-9]{5}$/);
        assert.deepEqual(vm.metadata.finalizers, [FINALIZERS.runnerRegistration]);
        assert.equal(vm.metadata.ownerReferences?.[0]?.uid, created.metadata.uid);
        assert.equal(vm.metadata.ownerReferences?.[0]?.controller, true);
        assert.deepEqual(vm.spec.templateRef, { name: "runner" });
        assert.deepEqual(vm.spec.workload?.command, ["/runner/run.sh"]);
      }
      // The cache catches up; the expectations are settled by the VMs' names and nothing more is created.
      void vmCache.start(stop.signal);
      await vmCache.waitForSync(stop.signal);
      const before = await reconciles(registry);
      controller.controller.enqueue("ns/p");
      await waitFor("reconcile after sync", async () => ((await reconciles(registry)) > before ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
      list = (await vms.list({ namespace: "ns" })).items;
      assert.equal(list.length, 2);
      // Counts written within 5 s of the last write are held back (decideStatusWrite) and written by the requeue that follows.
      const status = await waitFor("the counts written", async () => {
        const s = (await pools.get({ namespace: "ns", name: "p" })).status;
        return s?.starting === 2 ? s : undefined;
      }, { timeoutMs: 10_000, intervalMs: 50 });
      assert.equal(status.desired, 2);
      assert.equal(status?.conditions?.find((c) => c.type === "CredentialsValid")?.status, "False", "no credentials Secret: said so in a condition");
    } finally {
      stop.abort();
      await running;
    }
  });

  it("a webhook signed with one pool's secret changes that pool's demand and runners only", async () => {
    const stop = new AbortController();
    const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
    for (const name of ["a", "b"]) await pools.create({ ...pool, metadata: { name, namespace: "ns" }, spec: { ...pool.spec, webhook: { enabled: true, secretRef: { name: `hook-${name}`, key: "secret" } } } });
    const poolCache = new Informer({ client: pools });
    void poolCache.start(stop.signal);
    await poolCache.waitForSync(stop.signal);
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const controller = new PoolController({
      pools,
      vms,
      poolCache,
      vmCache: new Informer({ client: vms }),
      // Every job still waits, as the forge answers the verification of each queued delivery.
      forges: { forPool: async () => ({ kind: "github", mint: () => Promise.reject(new Error("no mint here")), removeRunner: async () => "done", listRunners: async () => [], jobState: async () => "queued" }) },
      recorder: new EventRecorder({ client: new FakeResourceClient<CoreEvent>(EVENT_RESOURCE), component: "test", instance: "test" }),
      registry: new Registry(),
      logger: silentLogger,
    });
    try {
      const job = (action: WorkflowJobEvent["action"], jobId: number, runnerName: string | null): WorkflowJobEvent => ({
        deliveryId: `d-${jobId}-${action}`,
        action,
        jobId,
        runId: 1,
        runAttempt: 1,
        jobName: "build",
        labels: ["imp"],
        runnerName,
        runnerId: null,
        runnerGroupName: null,
        conclusion: null,
        repository: { owner: "acme", name: "web", fullName: "acme/web" },
        organization: undefined,
        enterprise: undefined,
        installationId: undefined,
        createdAt: Date.now(),
      });
      controller.demand.onWorkflowJob("github", job("queued", 1, null), new Set(["ns/b"]));
      await controller.demand.settled();
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/a"), 0, "pool a comes first by name, but the secret was b's");
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/b"), 1);
      controller.demand.onWorkflowJob("github", job("queued", 2, null), "all");
      await controller.demand.settled();
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/a"), 1, "the operator's own secret speaks for every pool: the first match takes it");
      controller.demand.onWorkflowJob("github", job("in_progress", 1, "a-bcdfg"), new Set(["ns/b"]));
      assert.equal(controller.demand.ledger("github").isBusy("a-bcdfg"), false, "b's secret cannot mark a's runner busy");
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/b"), 1, "nor take b's queued job away through a runner of a");
      controller.demand.onWorkflowJob("github", job("in_progress", 1, "b-bcdfg"), new Set(["ns/b"]));
      assert.equal(controller.demand.ledger("github").isBusy("b-bcdfg"), true);
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/b"), 0);
      // Cancelled while queued: completed with no runner (as GitHub sends it). It ends the demand,
      // but only in the pools the delivery's secret speaks for.
      controller.demand.onWorkflowJob("github", { ...job("queued", 3, null), deliveryId: "d-3-q" }, new Set(["ns/b"]));
      await controller.demand.settled();
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/b"), 1);
      const cancelled = { ...job("completed", 3, null), conclusion: "cancelled" };
      controller.demand.onWorkflowJob("github", cancelled, new Set(["ns/a"]));
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/b"), 1, "a's secret cannot cancel b's queued job");
      controller.demand.onWorkflowJob("github", cancelled, new Set(["ns/b"]));
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/b"), 0, "a job cancelled while queued is no longer demand");
      controller.demand.onWorkflowJob("github", job("queued", 4, null), "all");
      await controller.demand.settled();
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/a"), 2);
      controller.demand.onWorkflowJob("github", { ...job("completed", 4, null), conclusion: "cancelled" }, "all");
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/a"), 1, "the operator's own secret ends it wherever it was counted");
    } finally {
      stop.abort();
    }
  });

  it("each forge its own ledger: a Gitea delivery never touches a GitHub pool's job of the same number; a Gitea job a listing pool takes first is counted only by that listing", async () => {
    const stop = new AbortController();
    const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
    const gitea = (name: string, webhook: boolean): ImpVMRunnerPool => {
      const { github: _github, ...spec } = pool.spec;
      return { ...pool, metadata: { name, namespace: "ns" }, spec: { ...spec, minIdle: 0, gitea: { url: "http://127.0.0.1:9", credentialsSecretRef: { name: "gitea-token" }, scope: "repo", repository: "acme/web", labels: ["imp"] }, ...(webhook ? { webhook: { enabled: true, secretRef: { name: "hook", key: "secret" } } } : {}) } };
    };
    await pools.create({ ...pool, metadata: { name: "hub", namespace: "ns" }, spec: { ...pool.spec, minIdle: 0, webhook: { enabled: true, secretRef: { name: "hook", key: "secret" } } } });
    await pools.create(gitea("tea", true));
    const poolCache = new Informer({ client: pools });
    void poolCache.start(stop.signal);
    await poolCache.waitForSync(stop.signal);
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const asked: string[] = [];
    const controller = new PoolController({
      pools,
      vms,
      poolCache,
      vmCache: new Informer({ client: vms }),
      forges: { forPool: async (p) => ({ kind: p.spec.gitea === undefined ? "github" : "gitea", mint: () => Promise.reject(new Error("no mint here")), removeRunner: async () => "done", listRunners: async () => [], jobState: async () => { asked.push(p.metadata.name ?? ""); return "queued"; } }) },
      recorder: new EventRecorder({ client: new FakeResourceClient<CoreEvent>(EVENT_RESOURCE), component: "test", instance: "test" }),
      registry: new Registry(),
      logger: silentLogger,
    });
    const event = (action: WorkflowJobEvent["action"], runnerName: string | null): WorkflowJobEvent => ({
      deliveryId: `d-${action}`, action, jobId: 7, runId: 1, runAttempt: 1, jobName: "build", labels: ["imp"], runnerName, runnerId: null, runnerGroupName: null,
      conclusion: action === "completed" ? "success" : null, repository: { owner: "acme", name: "web", fullName: "acme/web" }, organization: "acme", enterprise: undefined, installationId: undefined,
    });
    try {
      controller.demand.onWorkflowJob("github", event("queued", null), "all");
      await controller.demand.settled();
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/hub"), 1);
      // Gitea's job 7 is another job: it runs and completes on Gitea, with the operator's trust for all.
      controller.demand.onWorkflowJob("gitea", event("in_progress", "tea-bcdfg"), "all");
      controller.demand.onWorkflowJob("gitea", event("completed", "tea-bcdfg"), "all");
      assert.equal(controller.demand.ledger("github").queuedJobs("ns/hub"), 1, "GitHub's job 7 still waits");
      assert.equal(controller.demand.ledger("github").isSettled(7, "ns/hub"), false);
      assert.equal(controller.demand.ledger("gitea").isFinished("tea-bcdfg"), true);
      assert.equal(controller.demand.ledger("github").isFinished("tea-bcdfg"), false);
      assert.deepEqual(asked, ["hub"], "the Gitea deliveries were no queued demand: nothing asked");
      // A listing Gitea pool first by name takes Gitea job 8: the webhook pool does not count it too.
      await pools.create(gitea("leaf", false));
      await waitFor("the listing pool in the cache", () => (poolCache.get("ns/leaf") === undefined ? undefined : true), { timeoutMs: 5_000, intervalMs: 10 });
      controller.demand.onWorkflowJob("gitea", { ...event("queued", null), jobId: 8, deliveryId: "d-8" }, new Set(["ns/tea"]));
      await controller.demand.settled();
      assert.equal(controller.demand.ledger("gitea").queuedJobs("ns/tea"), 0, "ns/leaf (listing) comes first by name: its listing counts job 8");
      assert.deepEqual(asked, ["hub"]);
    } finally {
      stop.abort();
    }
  });

  it("a restarted operator keeps backing off: the failure budget is taken up from the pool's status", async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS, { clock });
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS, { clock });
    const owner = await pools.create({ ...pool, spec: { ...pool.spec, minIdle: 1 } });
    // Three VMs of the pool failed before their runner started, the last one just now. Their
    // finalizer keeps them until their registration is removed (the setup controller's job, played here).
    for (let i = 1; i <= 3; i++) {
      const vm = await vms.create({
        apiVersion: API_VERSION,
        kind: "ImpVM",
        metadata: { name: `p-fail${i}`, namespace: "ns", labels: { [LABELS.pool]: "p" }, finalizers: [FINALIZERS.runnerRegistration], ownerReferences: [{ apiVersion: API_VERSION, kind: "ImpVMRunnerPool", name: "p", uid: owner.metadata.uid ?? "", controller: true }] },
        spec: { templateRef: { name: "runner" }, lifecycle: "ephemeral" },
      } as ImpVM);
      await vms.patchStatus({ namespace: "ns", name: vm.metadata.name ?? "" }, { status: { phase: "Failed", reason: "BootTimeout", phaseTimestamps: { failed: new Date(clock.now() - (3 - i) * 1_000).toISOString() } } });
    }

    /** One operator: its own caches and controller, fresh memory; stopped by the returned function. */
    async function operator(): Promise<{ reconcile: () => Promise<void>; stop: () => Promise<void> }> {
      const stop = new AbortController();
      const poolCache = new Informer({ client: pools });
      const vmCache = new Informer({ client: vms });
      vmCache.addIndex("imp-operator/vm-by-pool", labelIndex(LABELS.pool));
      void poolCache.start(stop.signal);
      void vmCache.start(stop.signal);
      await poolCache.waitForSync(stop.signal);
      await vmCache.waitForSync(stop.signal);
      const registry = new Registry();
      const c = new PoolController({
        pools,
        vms,
        poolCache,
        vmCache,
        forges: new PoolForges({ secrets: new FakeResourceClient<SecretObject>(SECRETS), logger: silentLogger }),
        recorder: new EventRecorder({ client: new FakeResourceClient<CoreEvent>(EVENT_RESOURCE), component: "test", instance: "test" }),
        registry,
        logger: silentLogger,
        clock,
      });
      const running = c.controller.start(stop.signal);
      let n = 0;
      return {
        reconcile: async () => {
          // Let the caches catch up with the last writes first, as time would.
          await new Promise((r) => setTimeout(r, 50));
          n++;
          c.controller.enqueue("ns/p");
          await waitFor(`reconcile ${n}`, async () => ((await reconciles(registry)) >= n ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
        },
        stop: async () => {
          stop.abort();
          await running;
        },
      };
    }
    const live = async (): Promise<ImpVM[]> => (await vms.list({ namespace: "ns" })).items.filter((vm) => vm.metadata.deletionTimestamp === undefined);

    const first = await operator();
    await first.reconcile();
    let status = (await pools.get({ namespace: "ns", name: "p" })).status;
    assert.equal(status?.failureBudget?.consecutiveFailures, 3);
    assert.equal(status?.failureBudget?.backoffUntil, new Date(clock.now() + 20_000).toISOString(), "5 s × 2² after the last failure");
    assert.deepEqual(await live(), [], "held back: nothing created");
    await first.stop();

    // Their registrations removed, the failed VMs go (the first operator deleted them); 5 s later
    // a new operator starts (a restart or a leader handover) and sees no failed VM at all.
    for (let i = 1; i <= 3; i++) await vms.patch({ namespace: "ns", name: `p-fail${i}` }, { metadata: { finalizers: null } });
    assert.deepEqual((await vms.list({ namespace: "ns" })).items, []);
    await clock.advance(5_000);
    const second = await operator();
    await second.reconcile();
    status = (await pools.get({ namespace: "ns", name: "p" })).status;
    assert.deepEqual(await live(), [], "the new operator still holds back");
    assert.equal(status?.failureBudget?.consecutiveFailures, 3, "not reset");
    assert.equal(status?.conditions?.find((c) => c.type === "ScalingLimited")?.reason, "StartFailureBackoff");

    await clock.advance(15_000);
    await second.reconcile();
    assert.equal((await live()).length, 1, "at the same backoffUntil it probes with one VM");
    await second.stop();
  });
});

describe("PoolController demand: replayed and stale deliveries, and listings", () => {
  const webhookPool = { ...pool, metadata: { name: "w", namespace: "ns", uid: "u-w" }, spec: { ...pool.spec, webhook: { enabled: true, secretRef: { name: "hook", key: "secret" } } } } as ImpVMRunnerPool;
  const delivery = (action: WorkflowJobEvent["action"], jobId: number, createdAt: number | undefined, runnerName: string | null = null): WorkflowJobEvent => ({
    deliveryId: `d-${jobId}-${action}-${Math.random()}`,
    action,
    jobId,
    runId: 1,
    runAttempt: 1,
    jobName: "build",
    labels: ["imp"],
    runnerName,
    runnerId: null,
    runnerGroupName: null,
    conclusion: null,
    repository: { owner: "acme", name: "web", fullName: "acme/web" },
    organization: undefined,
    enterprise: undefined,
    installationId: undefined,
    ...(createdAt === undefined ? {} : { createdAt }),
  });

  async function harness(forge: Partial<PoolForge>): Promise<{ controller: PoolController; registry: Registry; clock: FakeClock; asked: number[]; stop: AbortController }> {
    const stop = new AbortController();
    const clock = new FakeClock(Date.parse("2026-12-04T12:00:00Z"));
    const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
    await pools.create(webhookPool);
    const poolCache = new Informer({ client: pools });
    void poolCache.start(stop.signal);
    await poolCache.waitForSync(stop.signal);
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    const asked: number[] = [];
    const registry = new Registry();
    const full: PoolForge = {
      kind: "github",
      mint: () => Promise.reject(new Error("no mint here")),
      removeRunner: async () => "done",
      listRunners: async () => [],
      ...forge,
    };
    const controller = new PoolController({
      pools,
      vms,
      poolCache,
      vmCache: new Informer({ client: vms }),
      forges: { forPool: async () => ({ ...full, jobState: async (repo, id) => (asked.push(id), (await forge.jobState?.(repo, id)) ?? "unknown") }) },
      recorder: new EventRecorder({ client: new FakeResourceClient<CoreEvent>(EVENT_RESOURCE), component: "test", instance: "test" }),
      registry,
      logger: silentLogger,
      clock,
    });
    return { controller, registry, clock, asked, stop };
  }

  const signals = async (registry: Registry, source: string, result: string): Promise<number> =>
    (await registry.getSingleMetric("imp_operator_demand_signals_total")?.get())?.values.find((v) => v.labels.source === source && v.labels.result === result)?.value ?? 0;

  it("never counts a queued delivery for a job seen taken or completed (a replay), whatever its delivery id", async () => {
    const h = await harness({ jobState: async () => "queued" });
    try {
      const now = h.clock.now();
      h.controller.demand.onWorkflowJob("github", delivery("queued", 7, now), "all");
      await h.controller.demand.settled();
      assert.equal(h.controller.demand.ledger("github").queuedJobs("ns/w"), 1, "the forge says job 7 waits");
      h.controller.demand.onWorkflowJob("github", delivery("completed", 7, now, "w-bcdfg"), "all");
      assert.equal(h.controller.demand.ledger("github").queuedJobs("ns/w"), 0);
      h.controller.demand.onWorkflowJob("github", delivery("queued", 7, now), "all");
      assert.equal(h.controller.demand.ledger("github").queuedJobs("ns/w"), 0, "the signed body replayed under a new delivery id");
      assert.equal(await signals(h.registry, "webhook", "replayed"), 1);
      assert.deepEqual(h.asked, [7], "the first delivery was verified; a known replay costs no call to the forge");
    } finally {
      h.stop.abort();
    }
  });

  it("checks every queued delivery with the forge, however recent, and counts it only while the job waits", async () => {
    const states = new Map<number, JobState>([[8, "done"], [9, "queued"]]);
    const h = await harness({ jobState: async (_repo, id) => states.get(id) ?? "unknown" });
    try {
      const hourAgo = h.clock.now() - 3_600_000;
      h.controller.demand.onWorkflowJob("github", delivery("queued", 8, hourAgo), "all");
      h.controller.demand.onWorkflowJob("github", delivery("queued", 9, hourAgo), "all");
      h.controller.demand.onWorkflowJob("github", delivery("queued", 10, undefined), "all");
      await waitFor("the three checks", async () => ((await signals(h.registry, "webhook", "stale")) === 2 && (await signals(h.registry, "webhook", "counted")) === 1 ? true : undefined), { timeoutMs: 5_000, intervalMs: 10 });
      assert.deepEqual(h.asked.sort(), [10, 8, 9].sort());
      assert.equal(h.controller.demand.ledger("github").queuedJobs("ns/w"), 1, "only job 9, which still waits");
      assert.equal(h.controller.demand.ledger("github").isQueued("ns/w", 9), true);
      // Queued five seconds ago, but done by now (a replay after the operator forgot it): not counted.
      states.set(11, "done");
      h.controller.demand.onWorkflowJob("github", delivery("queued", 11, h.clock.now() - 5_000), "all");
      await h.controller.demand.settled();
      assert.ok(h.asked.includes(11), "a recent delivery is asked about too");
      assert.equal(h.controller.demand.ledger("github").isQueued("ns/w", 11), false, "and not counted: the forge says its job no longer waits");
    } finally {
      h.stop.abort();
    }
  });
});
