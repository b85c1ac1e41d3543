/**
 * Failure proof, GitHub side: the GitHub test server misbehaves (5xx, rate limits, a response slower
 * than the operator's request timeout, expired installation tokens, dropped and duplicated
 * webhooks, a runner it reports busy) on the real world of test/e2e/runner-path (control plane,
 * `imp operator` and two `imp agent`s as processes, real QEMU). After each case the invariant
 * checker judges I1–I6 (test/fault/fault-case.ts).
 *
 * Faults are consumed by the first requests matching their path and method, on any pool: the
 * cases run one after another, and each case's pool is the only one live while it runs.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import type { ImpVM } from "../../src/api/index.ts";
import { waitFor } from "../../src/shared/index.ts";
import { RunnerWorld, REPO, worldUnavailable, nameOf } from "../e2e/runner-path/world.ts";
import type { TestJob } from "../github/server.ts";
import type { SentWebhook } from "../github/webhook-sender.ts";
import { runFaultCase, type CaseContext, type FaultCase } from "./fault-case.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (github): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

const RUNNERS = `/repos/${REPO.owner}/${REPO.repo}/actions/runners`;
const JITCONFIG = new RegExp(`^${RUNNERS}/generate-jitconfig$`);
const RUNNER_BY_ID = new RegExp(`^${RUNNERS}/\\d+$`);
const RUNNER_LIST = new RegExp(`^${RUNNERS}$`);
/** The operator's GitHub request timeout (src/forge/github/client.ts DEFAULT_REQUEST_TIMEOUT_MS; `imp operator` has no flag for it). */
const CLIENT_TIMEOUT_MS = 30_000;
/** The pool controller lists the pool's runners on GitHub this often (DEFAULT_RUNNER_LIST_INTERVAL_MS). */
const RUNNER_LIST_INTERVAL_MS = 30_000;
/** A webhook pool lists the jobs waiting on GitHub this often (DEFAULT_DEMAND_LIST_INTERVAL_MS). */
const DEMAND_LIST_INTERVAL_MS = 30_000;

const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

/** Queues a job for the case's pool. */
function queue(ctx: CaseContext, name: string, run = "echo hi"): TestJob {
  return ctx.world.queueJob(`${ctx.pool}-${name}`, [{ name: "step", run }], ctx.labels);
}

/** Every VM of the case's namespace this world has seen, deleted ones included. */
function vmsSeen(ctx: CaseContext): string[] {
  return [...ctx.world.seenVms].filter(([, h]) => h.last.metadata.namespace === ctx.namespace).map(([name]) => name);
}

async function noLiveVm(ctx: CaseContext, what: string, timeoutMs = 180_000): Promise<void> {
  await waitFor(`${what}: no live VM left in ${ctx.namespace}`, async () => {
    const vms = (await ctx.world.listVms()).filter((vm) => vm.metadata.namespace === ctx.namespace && !["Succeeded", "Failed"].includes(vm.status?.phase ?? ""));
    return vms.length === 0 ? true : undefined;
  }, { timeoutMs, intervalMs: 250 });
}

async function faultsConsumed(ctx: CaseContext, timeoutMs = 180_000): Promise<void> {
  await waitFor("every injected GitHub fault consumed", () => (ctx.world.github.faultsLeft === 0 ? true : undefined), { timeoutMs, intervalMs: 100 });
}

/** Deletes one VM behind the pool's back (as a person with kubectl would): its registration finalizer must remove the runner. */
async function deleteVm(ctx: CaseContext, vm: ImpVM): Promise<void> {
  await ctx.world.kubectl(["-n", ctx.namespace, "delete", "impvm", nameOf(vm), "--wait=false"]);
}

/** Waits until GitHub no longer has a runner named `name`; returns when (Date.now()). */
async function registrationGone(ctx: CaseContext, name: string, timeoutMs = 180_000): Promise<number> {
  await waitFor(`runner ${name} gone from GitHub`, () => (ctx.world.github.runnerNamed(name) === undefined ? true : undefined), { timeoutMs, intervalMs: 100 });
  return Date.now();
}

const operatorLog = (ctx: CaseContext): string => readFileSync(ctx.world.operator.logPath, "utf8");

/** Job A run to success on a pool of minIdle 0, its VM gone; its `queued` delivery as GitHub sent it. */
async function completedJobAndItsQueuedDelivery(ctx: CaseContext, name: string): Promise<{ job: TestJob; queued: SentWebhook; vmsBefore: number }> {
  const job = queue(ctx, name);
  await ctx.world.waitForJob(job, "completed");
  assert.equal(job.conclusion, "success");
  await noLiveVm(ctx, "job A done, minIdle 0");
  const queued = ctx.world.github.webhooks.sent.find((w) => w.action === "queued" && (w.payload["workflow_job"] as { id?: number } | undefined)?.id === job.id);
  assert.ok(queued !== undefined, "job A's queued delivery was sent");
  return { job, queued, vmsBefore: vmsSeen(ctx).length };
}

/** After the pool's next demand listing (it has reconciled since), still no VM and no runner for the replayed job. */
async function noVmAfterNextListing(ctx: CaseContext, vmsBefore: number): Promise<void> {
  const listings = (): number => (operatorLog(ctx).match(/listed the jobs waiting on the forge/g) ?? []).length;
  const listingsBefore = listings();
  await waitFor("the pool's next demand listing", () => (listings() > listingsBefore ? true : undefined), { timeoutMs: DEMAND_LIST_INTERVAL_MS + 30_000, intervalMs: 200 });
  const after = vmsSeen(ctx);
  assert.equal(after.length, vmsBefore, `no VM for a job that no longer waits: ${after.join(", ")}`);
  assert.equal([...ctx.world.github.runners.values()].filter((r) => r.name.startsWith(`${ctx.pool}-`)).length, 0, "and no runner registered for it");
}

const cases: FaultCase[] = [
  {
    id: "github-5xx-jitconfig",
    injected: "GitHub answers 502 to the first 3 POST …/actions/runners/generate-jitconfig requests",
    where: "minting the one-time runner setup of the pool's first VM (SetupController, before anything records a registration)",
    async arm(ctx) {
      ctx.world.github.injectFault({ kind: "server-error", status: 502, count: 3, path: JITCONFIG, method: "POST" });
      ctx.faultNow();
    },
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const mints = ctx.world.github.requestsTo(JITCONFIG, "POST").filter((r) => r.name?.startsWith(`${ctx.pool}-`));
      const failed = mints.filter((r) => r.faulted);
      const registered = mints.filter((r) => r.status === 201).map((r) => r.name);
      assert.equal(ctx.world.github.faultsLeft, 0, "every 502 was consumed");
      assert.equal(failed.length, 3, "the three 502s hit this pool's mint");
      assert.equal(new Set(registered).size, registered.length, `no runner name minted twice: ${registered.join(", ")}`);
      const firstToOk = (mints.find((r) => r.status === 201)?.at ?? 0) - (failed[0]?.at ?? 0);
      return `the 502s were retried with backoff inside one mint (plugin-retry: ${mints.length} requests, ${failed.length} answered 502, first 502 → 201 in ${s(firstToOk)}); ${registered.length} runner(s) registered, each name once; runner ${nameOf(vm)} online and idle`;
    },
  },
  {
    id: "github-429-retry-after-jitconfig",
    injected: "GitHub answers 429 with Retry-After: 8 (secondary rate limit) to the first POST …/actions/runners/generate-jitconfig",
    where: "minting the one-time runner setup of the pool's first VM",
    async arm(ctx) {
      ctx.world.github.injectFault({ kind: "secondary-rate-limit", status: 429, retryAfterSeconds: 8, count: 1, path: JITCONFIG, method: "POST" });
      ctx.faultNow();
    },
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const mints = ctx.world.github.requestsTo(JITCONFIG, "POST").filter((r) => r.name?.startsWith(`${ctx.pool}-`));
      const limited = mints.find((r) => r.faulted);
      assert.ok(limited !== undefined && limited.status === 429, "the 429 hit this pool's mint");
      const next = mints.find((r) => r.at > limited.at);
      assert.ok(next !== undefined, "the mint was tried again");
      const waited = next.at - limited.at;
      // A lower bound only: a slow machine makes the wait longer, never shorter.
      assert.ok(waited >= 8_000 - 100, `the operator waited Retry-After (8 s) before asking again; it waited ${waited} ms`);
      const registered = mints.filter((r) => r.status === 201).map((r) => r.name);
      assert.equal(new Set(registered).size, registered.length, "no runner name minted twice");
      return `plugin-throttling honoured Retry-After: the next generate-jitconfig came ${s(waited)} after the 429 (for ${next.name === limited.name ? "the same" : "another"} runner name); runner ${nameOf(vm)} online and idle`;
    },
  },
  {
    id: "github-secondary-limit-teardown",
    injected: "GitHub answers 403 secondary rate limit (Retry-After: 3) to the next 2 DELETE …/actions/runners/{id} and the next GET …/actions/runners (list)",
    where: "teardown: an idle runner's ImpVM is deleted (registration finalizer removes the runner), and the pool's periodic runner list",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const name = nameOf(vm);
      const { github } = ctx.world;
      github.injectFault({ kind: "secondary-rate-limit", status: 403, retryAfterSeconds: 3, count: 2, path: RUNNER_BY_ID, method: "DELETE" });
      github.injectFault({ kind: "secondary-rate-limit", status: 403, retryAfterSeconds: 3, count: 1, path: RUNNER_LIST, method: "GET" });
      ctx.faultNow();
      const at = Date.now();
      await deleteVm(ctx, vm);
      const gone = await registrationGone(ctx, name);
      await faultsConsumed(ctx, RUNNER_LIST_INTERVAL_MS * 4);
      const deletes = github.requestsTo(RUNNER_BY_ID, "DELETE").filter((r) => r.at >= at);
      const lists = github.requestsTo(RUNNER_LIST, "GET").filter((r) => r.at >= at);
      const listOk = lists.find((r) => !r.faulted && r.status === 200 && r.at > (lists.find((l) => l.faulted)?.at ?? Infinity));
      const replacement = await ctx.idleRunner();
      return `the deregistration waited out the limit twice (${deletes.filter((r) => r.faulted).length} × 403, then ${deletes.filter((r) => !r.faulted).map((r) => r.status).join(", ")}): ${name} removed from GitHub ${s(gone - at)} after its VM was deleted; the throttled runner list was retried (${listOk === undefined ? "by the next list" : `${s(listOk.at - (lists.find((l) => l.faulted)?.at ?? 0))} later`}); replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "github-token-expired",
    injected: "every installation token the GitHub test server issued is expired (expireTokens): GitHub answers 401 Bad credentials to it",
    where: "mid-run: an idle runner is online; then a job runs, its VM ends, is deregistered and replaced (teardown DELETE, list and replacement mint all carry the old token)",
    async run(ctx) {
      await ctx.idleRunner();
      const { github } = ctx.world;
      const before = new Set(github.tokens.keys());
      github.expireTokens();
      ctx.faultNow();
      const at = Date.now();
      const job = queue(ctx, "after-expiry");
      await ctx.world.waitForJob(job, "completed");
      assert.equal(job.conclusion, "success");
      const replacement = await ctx.vm("a replacement idle runner", (v) => v.status?.phase === "Running" && nameOf(v) !== job.runnerName && github.runnerNamed(nameOf(v))?.status === "online");
      const refused = github.requests.filter((r) => r.at >= at && r.status === 401);
      const minted = [...github.tokens.keys()].filter((t) => !before.has(t));
      assert.ok(minted.length >= 1, "the operator minted a new installation token");
      const firstOk = github.requests.find((r) => r.at >= at && r.operationId !== undefined && r.operationId !== "apps/create-installation-access-token" && r.status >= 200 && r.status < 300);
      return `${refused.length} request(s) refused with 401 (${[...new Set(refused.map((r) => `${r.method} ${r.operationId ?? r.path}`))].join(", ")}); the operator dropped its cached token and minted ${minted.length} new one(s), retried (first success ${firstOk === undefined ? "?" : `${firstOk.method} ${firstOk.operationId ?? ""}`} ${firstOk === undefined ? "" : s(firstOk.at - at)} after the expiry); ${job.name} ${job.conclusion ?? "?"} on ${job.runnerName ?? "?"}; replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "github-webhook-queued-dropped",
    injected: "the workflow_job queued webhook of the job is never delivered (webhooks.dropNext = 1)",
    where: "burst capacity: a pool with minIdle 0 and spec.webhook enabled (its own secretRef), no VM; only demand makes it create one",
    pool: { minIdle: 0, maxConcurrent: 2 },
    async run(ctx) {
      const { github } = ctx.world;
      github.webhooks.dropNext = 1;
      const a = queue(ctx, "dropped");
      ctx.faultNow();
      const queuedAt = Date.now();
      // Bound: one demand listing (DEMAND_LIST_INTERVAL_MS), a boot and a runner coming online, on a loaded 2-core machine.
      const bound = DEMAND_LIST_INTERVAL_MS + 90_000;
      // The world's wait says, if it fails, who could have taken the job and what the operator and agents last logged.
      await ctx.world.waitForJob(a, "in_progress", bound);
      const waitedMs = Date.now() - queuedAt;
      await ctx.world.waitForJob(a, "completed");
      assert.equal(a.conclusion, "success");
      await noLiveVm(ctx, "the job done, minIdle 0");
      const seen = vmsSeen(ctx);
      assert.equal(seen.length, 1, `one VM for the one job: ${seen.map((n) => ctx.world.describeVm(n)).join(", ")}`);
      const dropped = github.webhooks.sent.filter((w) => w.status === "dropped").length;
      assert.equal(dropped, 1);
      assert.match(readFileSync(ctx.world.operator.logPath, "utf8"), /a queued job found by listing/, "the listing, not a webhook, brought the demand");
      return `job A got a runner ${s(waitedMs)} after it was queued although its webhook was dropped (the pool's listing of queued jobs found it; bound ${s(bound)}); one VM, cleaned up`;
    },
  },
  {
    id: "github-rerun-at-zero",
    injected: "a finished job is re-run (GitHub's \"Re-run job\": a new job id, run_attempt 2 of the same run) on a pool scaled to zero",
    where: "burst capacity: a pool with minIdle 0 and spec.webhook enabled, no VM; the re-run's queued delivery names a run whose first attempt completed (the stall PyTorch's ARC fleet hit, pytorch/ci-infra #900)",
    pool: { minIdle: 0, maxConcurrent: 2 },
    async run(ctx) {
      const done = await completedJobAndItsQueuedDelivery(ctx, "rerun");
      const rerun = ctx.world.github.rerunJob(done.job.id);
      ctx.faultNow();
      assert.equal(rerun.runId, done.job.runId);
      assert.equal(rerun.runAttempt, 2);
      await ctx.world.waitForJob(rerun, "completed");
      assert.equal(rerun.conclusion, "success", rerun.result?.log ?? "");
      const waited = (rerun.startedAt ?? Date.now()) - rerun.queuedAt;
      assert.equal(vmsSeen(ctx).length, done.vmsBefore + 1, `one more VM for the re-run: ${vmsSeen(ctx).join(", ")}`);
      const about = operatorLog(ctx).split("\n").filter((l) => l.includes(`"jobId":${rerun.id},`));
      assert.ok(!about.some((l) => l.includes("a replay; not counted")), "the re-run's delivery was not taken for a replay of the finished attempt");
      assert.ok(about.some((l) => l.includes("a queued delivery verified")), `the re-run was counted from its own queued delivery, not left to the listing backstop:\n${about.join("\n")}`);
      return `job ${done.job.id} completed and its VM ended; its re-run (job ${rerun.id}, attempt 2 of run ${rerun.runId}) got a runner ${s(waited)} after it was queued, from its own queued delivery; one more VM`;
    },
  },
  {
    id: "github-webhook-queued-replayed",
    injected: "after job A completed, its validly signed workflow_job queued body is delivered again under a new X-GitHub-Delivery (the delivery id is not signed)",
    where: "burst capacity: a pool with minIdle 0 and spec.webhook enabled, no VM; a replayed body must not make it create and register one",
    pool: { minIdle: 0, maxConcurrent: 2 },
    async run(ctx) {
      const { github } = ctx.world;
      const done = await completedJobAndItsQueuedDelivery(ctx, "replayed");
      ctx.faultNow();
      const replayed = await github.webhooks.replay(done.queued);
      assert.equal(replayed?.status, 202, "the replay is signed validly and accepted as a delivery");
      assert.notEqual(replayed?.deliveryId, done.queued.deliveryId);
      await waitFor("the operator recognised the replay", () => (/a replay; not counted/.test(operatorLog(ctx)) ? true : undefined), { timeoutMs: 30_000, intervalMs: 100 });
      await noVmAfterNextListing(ctx, done.vmsBefore);
      return `job A's queued body replayed under a new delivery id (202, signature valid): recognised as a replay, no VM and no registration after the pool's next reconcile and listing`;
    },
  },
  {
    id: "github-webhook-queued-replayed-after-restart",
    injected: "right after the operator restarts (its memory of deliveries and jobs gone), the validly signed workflow_job queued body of a job that already completed is delivered again under a new X-GitHub-Delivery",
    where: "burst capacity: a pool with minIdle 0 and spec.webhook enabled, no VM; the job completed seconds ago, so its body still looks recent",
    pool: { minIdle: 0, maxConcurrent: 2 },
    async run(ctx) {
      const { github } = ctx.world;
      const done = await completedJobAndItsQueuedDelivery(ctx, "replayed-restart");
      await ctx.world.restartOperator();
      ctx.faultNow();
      // As soon as the restarted operator's webhook endpoint answers (a refused connection is no delivery).
      const replayed = await waitFor("the restarted operator's webhook endpoint took the replay", async () => {
        const r = await github.webhooks.replay(done.queued);
        return r?.status === "failed" ? undefined : r;
      }, { timeoutMs: 60_000, intervalMs: 100 });
      assert.equal(replayed.status, 202, "the replay is signed validly and accepted as a delivery by the restarted operator");
      const verdict = new RegExp(`"deliveryId":"${replayed.deliveryId}"[^\n]*no longer waits`);
      await waitFor("the restarted operator asked GitHub about the job and did not count it", () => (verdict.test(operatorLog(ctx)) ? true : undefined), { timeoutMs: 30_000, intervalMs: 100 });
      await noVmAfterNextListing(ctx, done.vmsBefore);
      const asked = github.requests.filter((r) => r.operationId === "actions/get-job-for-workflow-run" && r.path.endsWith(`/jobs/${done.job.id}`));
      assert.ok(asked.length >= 1, "the job's state was asked of GitHub");
      return `job A's queued body, replayed under a new delivery id right after the operator restarted (202, signature valid, no memory of job A left): the operator asked GitHub (get-job-for-workflow-run: completed) and did not count it; no VM and no registration after the pool's next listing`;
    },
  },
  {
    id: "github-webhook-queued-duplicated",
    injected: "the workflow_job queued webhook of the job is delivered twice with the same X-GitHub-Delivery (webhooks.duplicateNext = 1)",
    where: "burst capacity: a pool with minIdle 0 and spec.webhook enabled, no VM",
    pool: { minIdle: 0, maxConcurrent: 3 },
    async run(ctx) {
      const { github } = ctx.world;
      github.webhooks.duplicateNext = 1;
      const job = queue(ctx, "twice");
      ctx.faultNow();
      await ctx.world.waitForJob(job, "completed");
      assert.equal(job.conclusion, "success");
      await noLiveVm(ctx, "the job done, minIdle 0");
      const deliveries = github.webhooks.sent.filter((w) => w.action === "queued");
      const last = deliveries.at(-1);
      const twice = deliveries.filter((w) => w.deliveryId === last?.deliveryId);
      assert.equal(twice.length, 2, "the queued webhook was delivered twice");
      const seen = vmsSeen(ctx);
      assert.equal(seen.length, 1, `one VM for one job, however often its webhook came: ${seen.map((n) => ctx.world.describeVm(n)).join(", ")}`);
      return `both deliveries answered ${twice.map((w) => w.status).join(" and ")}; the job counted once: 1 VM (${seen.join(", ")}), ${job.name} ${job.conclusion ?? "?"} on ${job.runnerName ?? "?"}; nothing left after it (maxConcurrent 3 left room for a second VM had it been counted twice)`;
    },
  },
  {
    id: "github-runner-busy-scale-down",
    injected: "GitHub reports the idle runner busy (setRunnerState busy: true): DELETE …/actions/runners/{id} answers 422 \"still running a job\" and the runner list says busy; 20 s later it is idle again",
    where: "scale-down: the pool's minIdle is lowered from 1 to 0 while its only runner is idle in Imp's view",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const name = nameOf(vm);
      const { github } = ctx.world;
      const runner = github.runnerNamed(name);
      assert.ok(runner !== undefined);
      github.setRunnerState(runner.id, { busy: true });
      ctx.faultNow();
      const at = Date.now();
      await ctx.world.applyPool(ctx.pool, { minIdle: 0, maxConcurrent: 2, labels: ctx.labels }, ctx.namespace);
      // While GitHub says busy the runner must stay: never removed under a job.
      const watchUntil = Date.now() + 20_000;
      // What explains a VM that did not stay: its state, GitHub's answers since the fault, the operator's words about it.
      const explain = (current: ImpVM | undefined): string => {
        const state = current === undefined ? "gone from the API" : `phase ${current.status?.phase ?? "-"}${current.metadata.deletionTimestamp === undefined ? "" : ", deleting"}${current.status?.reason === undefined ? "" : `, ${current.status.reason}: ${(current.status.message ?? "").slice(0, 300)}`}`;
        const deletes = github.requestsTo(RUNNER_BY_ID, "DELETE").filter((r) => r.at >= at).map((r) => r.status).join(", ");
        const said = ctx.world.operator.log().split("\n").filter((l) => l.includes(name)).slice(-12).join("\n");
        return `${name}: ${state}; GitHub: ${github.runnerNamed(name) === undefined ? "not registered" : `registered, busy ${String(github.runnerNamed(name)?.busy)}`}; DELETEs since the fault: ${deletes === "" ? "none" : deletes}\n${said}`;
      };
      while (Date.now() < watchUntil) {
        const current = await ctx.world.getVm(name, ctx.namespace);
        if (current === undefined || current.metadata.deletionTimestamp !== undefined || current.status?.phase !== "Running") assert.fail(`${name} was not kept Running while GitHub said it is busy: ${explain(current)}`);
        assert.ok(github.runnerNamed(name) !== undefined, `${name} still registered while busy`);
        await new Promise((r) => setTimeout(r, 250));
      }
      const busyAnswers = github.requestsTo(RUNNER_BY_ID, "DELETE").filter((r) => r.at >= at && r.status === 422).length;
      const pool = await ctx.world.pools.get({ namespace: ctx.namespace, name: ctx.pool });
      const ready = pool.status?.conditions?.find((c) => c.type === "Ready");
      assert.equal(ready?.status, "True", `"busy" is not an error: the pool stays Ready (${ready?.reason ?? ""}: ${ready?.message ?? ""})`);
      github.setRunnerState(runner.id, { busy: false });
      const idleAt = Date.now();
      const gone = await registrationGone(ctx, name, RUNNER_LIST_INTERVAL_MS * 4);
      await noLiveVm(ctx, "scaled down to 0");
      return `${busyAnswers} DELETE(s) answered 422 busy${busyAnswers === 0 ? " (the runner list said busy first, so none was tried)" : ""}; the operator kept ${name} (Running, registered, pool Ready) for the 20 s it was busy; once GitHub said idle, the next runner list let the scale-down remove it (${s(gone - idleAt)} after) and its VM ended`;
    },
  },
  {
    id: "github-delete-timeout-teardown",
    injected: `GitHub answers the next DELETE …/actions/runners/{id} only after 40 s, past the operator's ${CLIENT_TIMEOUT_MS / 1000} s request timeout (the late answer is not acted on: the runner stays registered)`,
    where: "teardown: an idle runner's ImpVM is deleted; its registration finalizer removes the runner from GitHub",
    async run(ctx) {
      const vm = await ctx.idleRunner();
      const name = nameOf(vm);
      const { github } = ctx.world;
      github.injectFault({ kind: "delay", ms: 40_000, count: 1, path: RUNNER_BY_ID, method: "DELETE" });
      ctx.faultNow();
      const at = Date.now();
      await deleteVm(ctx, vm);
      const gone = await registrationGone(ctx, name);
      const deletes = github.requestsTo(RUNNER_BY_ID, "DELETE").filter((r) => r.at >= at);
      const timedOut = deletes.find((r) => r.faulted);
      const retried = deletes.find((r) => !r.faulted && r.status === 204);
      assert.ok(timedOut !== undefined && timedOut.status === 0, "the slow DELETE was abandoned by the operator (the client hung up)");
      assert.ok(retried !== undefined, "the DELETE was sent again and removed the runner");
      const replacement = await ctx.idleRunner();
      return `the operator gave up on the slow DELETE and retried it ${s(retried.at - timedOut.at)} after it was sent (timeout + backoff); ${name} removed ${s(gone - at)} after its VM was deleted; replacement ${nameOf(replacement)} online`;
    },
  },
  {
    id: "github-5xx-delete-after-job",
    injected: "GitHub answers 503 to the next 5 DELETE …/actions/runners/{id} (more than the 3 retries of one request)",
    where: "teardown after a job: the runner's VM Succeeded; its registration finalizer removes the runner (GitHub itself drops an ephemeral runner at the end of its job, so a success answers 404 = gone)",
    async run(ctx) {
      await ctx.idleRunner();
      const { github } = ctx.world;
      // Long enough to arm the fault while the job runs: an `echo` alone once ran and was torn down
      // between two polls of the test, so the fault came after the teardown it was meant for.
      const job = queue(ctx, "then-teardown", "sleep 10; echo hi");
      await ctx.world.waitForJob(job, "in_progress");
      assert.equal(job.status, "in_progress", "the fault is armed while the job runs");
      const injectedAt = Date.now();
      github.injectFault({ kind: "server-error", status: 503, count: 5, path: RUNNER_BY_ID, method: "DELETE" });
      await ctx.world.waitForJob(job, "completed");
      ctx.faultNow();
      const at = Date.now();
      assert.equal(job.conclusion, "success");
      const ran = job.runnerName ?? "";
      await faultsConsumed(ctx);
      const done = await waitFor(`${ran} deregistered and deleted`, async () => ((await ctx.world.getVm(ran, ctx.namespace)) === undefined ? Date.now() : undefined), { timeoutMs: 180_000, intervalMs: 200 });
      const deletes = github.requestsTo(RUNNER_BY_ID, "DELETE").filter((r) => r.at >= injectedAt);
      const gaps = deletes.slice(1).map((r, i) => r.at - (deletes[i]?.at ?? r.at));
      assert.ok(deletes.filter((r) => r.faulted).length === 5, "all five 503s hit the teardown");
      assert.ok(deletes.some((r) => !r.faulted && (r.status === 404 || r.status === 204)), "a DELETE after the 503s succeeded");
      const replacement = await ctx.idleRunner();
      return `${ran} ended after ${job.name} (${job.conclusion ?? "?"}); ${deletes.length} DELETEs (${deletes.map((r) => r.status).join(", ")}), spaced ${gaps.map(s).join(", ")}: retried by the client (plugin-retry, 3 retries a request, 1 s · n² apart) and, once a request gave up, by the controller's requeue with backoff; finalizer removed, VM deleted ${s(done - at)} after the job completed; replacement ${nameOf(replacement)} online`;
    },
  },
];

describe("failure proof: GitHub faults", { skip: unavailable, timeout: 3_600_000, concurrency: 1 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await world?.dispose();
  });
  for (const c of cases) {
    it(`${c.id}: ${c.injected} — ${c.where}`, async () => {
      const started = Date.now();
      const result = await runFaultCase(world, suite, c).catch((err: unknown) => {
        process.stdout.write(`# ${c.id} FAILED after ${s(Date.now() - started)}: ${String((err as Error).message ?? err).slice(0, 4000)}\n`);
        throw err;
      });
      process.stdout.write(`# ${c.id}: ${result.impDid}; recovered in ${result.recoverMs} ms; case took ${s(Date.now() - started)}\n`);
    });
  }
});
