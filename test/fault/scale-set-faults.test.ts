/**
 * Failure proof, scale-set mode: the faults users of actions-runner-controller's scale-set listener
 * met — the listener killed mid-poll or right around its acknowledgement, a 409 for the session
 * after a restart, a session refresh that 404s, an expired queue token, a message delivered three
 * times, a job another scale set acquired first, the scale set deleted on GitHub, the Actions
 * service answering 5xx for a minute — on the real world of test/e2e/runner-path (control plane,
 * `imp operator` and two `imp agent`s as processes, real QEMU). Besides I1–I6 (judged after each
 * case), each case asserts that the job queued through the fault was taken by a runner within its
 * stated bound, and that it cost exactly one VM.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { GitHubClient, ScaleSetClient } from "../../src/forge/index.ts";
import type { ImpVMRunnerPool as Pool } from "../../src/api/index.ts";
import { waitFor } from "../../src/shared/index.ts";
import { RunnerWorld, worldUnavailable, REPO } from "../e2e/runner-path/world.ts";
import { APP_ID, INSTALLATION_ID } from "../github/harness.ts";
import type { TestJob } from "../github/server.ts";
import { crashed, plan, runFaultCase, type CaseContext, type FaultCase } from "./fault-case.ts";

const unavailable = await worldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# fault suite (scale sets): cannot run on this machine: ${unavailable}\n`);
const suite = import.meta.filename;

/** A VM boots and its runner takes a job within this, on a loaded 2-core machine under TCG. */
const BOOT_MS = 120_000;
/** The world's test server expires a session no one polls after this (RunnerWorld's actionsService timings). */
const SESSION_IDLE_MS = 20_000;
const POOL = { minIdle: 0, maxConcurrent: 2, scaleSet: true };
/** The burst of scale-set-cluster-full-burst, as the issue that asked for it put it: ten jobs on a cluster with room for two. */
const BURST = 10;

const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

async function poolOf(ctx: CaseContext): Promise<Pool> {
  return JSON.parse(await ctx.world.kubectl(["-n", ctx.namespace, "get", "impvmrunnerpool", ctx.pool, "-o", "json"])) as Pool;
}

/** Waits until the pool's listener holds a session and says so in the pool's status. */
async function listening(ctx: CaseContext, timeoutMs = 120_000): Promise<Pool> {
  return ctx.world.waitUntil(`${ctx.pool} listening`, async () => {
    const pool = await poolOf(ctx).catch(() => undefined);
    const c = pool?.status?.conditions?.find((x) => x.type === "ScaleSetListening");
    return c?.status === "True" && pool?.status?.scaleSet?.sessionId !== undefined ? pool : undefined;
  }, timeoutMs);
}

/** The Warning/Normal Event reasons recorded on the case's pool. */
async function poolEvents(ctx: CaseContext): Promise<string[]> {
  const list = JSON.parse(await ctx.world.kubectl(["-n", ctx.namespace, "get", "events", "--field-selector", `involvedObject.kind=ImpVMRunnerPool,involvedObject.name=${ctx.pool}`, "-o", "json"])) as { items: Array<{ reason?: string }> };
  return list.items.map((e) => e.reason ?? "");
}

function queue(ctx: CaseContext, name: string): TestJob {
  // A scale set's jobs name it in runs-on (its name is the pool's; the pool's labels ride along).
  return ctx.world.queueJob(`${ctx.pool}-${name}`, [{ name: "step", run: "echo hi" }], [ctx.pool]);
}

/** Waits until a runner took `job` (bounded), then until it completed successfully; returns how long it waited. */
async function takenWithin(ctx: CaseContext, job: TestJob, boundMs: number, from = job.queuedAt): Promise<number> {
  await waitFor(`${job.name} taken by a runner within ${s(boundMs)}`, () => (job.status !== "queued" ? true : undefined), { timeoutMs: Math.max(1_000, from + boundMs - Date.now()), intervalMs: 200 }).catch(async (err: unknown) => Promise.reject(new Error(`${String(err)}\n${await whereItStuck(ctx, job)}`)));
  const waited = (job.startedAt ?? Date.now()) - job.queuedAt;
  await waitFor(`${job.name} completed`, () => (job.status === "completed" ? true : undefined), { timeoutMs: 300_000, intervalMs: 200 });
  assert.equal(job.conclusion, "success", `${job.name}: ${job.result?.log ?? ""}`);
  return waited;
}

/** What a job that was not taken in time is explained by: the pool's scale-set status and conditions, the case's VMs and their phases, the listener's requests since the job was queued. */
async function whereItStuck(ctx: CaseContext, job: TestJob): Promise<string> {
  const pool = await ctx.world.pools.get({ namespace: ctx.namespace, name: ctx.pool }).catch(() => undefined);
  const conditions = (pool?.status?.conditions ?? []).map((c) => `${c.type}=${c.status} ${c.reason ?? ""}: ${c.message ?? ""}`).join("; ");
  const vms = [...ctx.world.seenVms].filter(([, h]) => h.last.metadata.namespace === ctx.namespace).map(([name, h]) => `${name}@${h.last.status?.nodeName ?? "-"}: ${h.phases.join(" → ")}${h.last.status?.reason === undefined ? "" : ` (${h.last.status.reason}: ${h.last.status.message ?? ""})`}`);
  const requests = ctx.world.github.requests.filter((r) => r.at >= job.queuedAt && /_apis|actions\/runner|scale|sessions|acquire/i.test(r.path)).map((r) => `${r.method} ${r.path.slice(0, 80)} ${r.status}`);
  return [`pool status: ${JSON.stringify(pool?.status?.scaleSet ?? {})}; conditions: ${conditions}`, `VMs: ${vms.join(", ") || "none"}`, `GitHub requests since queued (${requests.length}): ${requests.slice(-30).join(" | ")}`].join("\n");
}

/** The case's VMs, every one ever seen. */
const vmsSeen = (ctx: CaseContext): string[] => [...ctx.world.seenVms].filter(([, h]) => h.last.metadata.namespace === ctx.namespace).map(([name]) => name);

/**
 * One VM per job (minIdle 0): exactly `jobs` VMs reached Running, and any other VM failed before its
 * runner started — a boot that failed (a BootTimeout on a loaded machine) is replaced by the pool's
 * start-failure path, which is not an order beyond the demand. An extra VM that runs, or waits, is.
 */
function oneVmPerJob(ctx: CaseContext, jobs: number): void {
  const mine = [...ctx.world.seenVms].filter(([, h]) => h.last.metadata.namespace === ctx.namespace);
  const described = mine.map(([name, h]) => `${name} (${h.phases.join(" → ")}${h.last.status?.reason === undefined ? "" : `, ${h.last.status.reason}: ${(h.last.status.message ?? "").slice(0, 200)}`})`);
  const ran = mine.filter(([, h]) => h.phases.includes("Running"));
  const extra = mine.filter(([, h]) => !h.phases.includes("Running") && h.last.status?.phase !== "Failed");
  assert.equal(ran.length, jobs, `one VM per job (minIdle 0) reached Running: ${described.join(", ")}`);
  assert.deepEqual(extra.map(([name]) => name), [], `no VM beyond those but ones that failed before their runner started: ${described.join(", ")}`);
}

/** A scale-set client of the world's GitHub for the case's repository (the test playing another listener). */
function clientOf(ctx: CaseContext): ScaleSetClient {
  const rest = new GitHubClient({ baseUrl: ctx.world.github.url, credentials: { appId: APP_ID, installationId: INSTALLATION_ID, privateKey: ctx.world.githubPrivateKey } });
  return new ScaleSetClient({ registrationTokens: rest, apiBaseUrl: ctx.world.github.url, scope: { kind: "repo", owner: REPO.owner, repo: REPO.repo } });
}

async function operatorRestarted(ctx: CaseContext): Promise<void> {
  await crashed(ctx.world.operator);
  ctx.faultNow();
  await ctx.world.operator.start({});
}

const cases: FaultCase[] = [
  {
    id: "scale-set-operator-sigkill-mid-poll",
    injected: "imp operator SIGKILLed while its listener's long poll is open; a job is queued while it is down",
    where: "scale-set listener, Polling: the session is open on GitHub and recorded in the pool's status; nothing closes it",
    pool: POOL,
    async run(ctx) {
      await listening(ctx);
      await ctx.world.operator.kill();
      ctx.faultNow();
      const job = queue(ctx, "while-down");
      const downAt = Date.now();
      await ctx.world.operator.start({});
      const waited = await takenWithin(ctx, job, 30_000 + BOOT_MS, downAt);
      const events = await poolEvents(ctx);
      assert.ok(!events.includes("SessionConflict"), "the new operator closed the recorded session instead of meeting 409");
      oneVmPerJob(ctx, 1);
      return `the restarted operator closed the dead session named in status.scaleSet.sessionId, opened its own (no 409), got the job's JobAvailable and acquired it; ${job.name} waited ${s(waited)} for a runner; one VM`;
    },
  },
  {
    id: "scale-set-crash-before-ack",
    injected: "operator SIGKILL (fault point listener.before-ack=crash@1)",
    where: "scale-set listener, after acting on the job's JobAvailable message (job acquired, demand taken) and before acknowledging it",
    pool: POOL,
    arm: (ctx) => ctx.world.restartOperator(plan("listener.before-ack=crash@1")),
    async run(ctx) {
      await listening(ctx);
      const job = queue(ctx, "before-ack");
      await operatorRestarted(ctx);
      const waited = await takenWithin(ctx, job, 60_000 + BOOT_MS);
      const acquires = ctx.world.github.requestsTo(/\/acquirejobs$/, "POST").filter((r) => r.at >= job.queuedAt).length;
      assert.ok(acquires >= 2, "the unacknowledged message came again and was acted on again");
      oneVmPerJob(ctx, 1);
      return `the message came again to the restarted operator (${acquires} acquirejobs, the second a no-op), demand stayed one job; ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-crash-after-ack",
    injected: "operator SIGKILL (fault point listener.after-ack=crash@1)",
    where: "scale-set listener, right after acknowledging the job's JobAvailable message (acted on first: acquired, demand taken)",
    pool: POOL,
    arm: (ctx) => ctx.world.restartOperator(plan("listener.after-ack=crash@1")),
    async run(ctx) {
      await listening(ctx);
      const job = queue(ctx, "after-ack");
      await operatorRestarted(ctx);
      const waited = await takenWithin(ctx, job, 60_000 + BOOT_MS);
      oneVmPerJob(ctx, 1);
      return `nothing was lost with the acknowledged message: the job was acquired before the ack, and the new session's statistics (totalAssignedJobs 1) carried the demand; ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-session-conflict-on-restart",
    injected: "imp operator SIGKILLed and its recorded session id removed from the pool's status (a crash before the status write): the restarted operator meets 409",
    where: "scale-set listener, Opening: GitHub still holds the dead operator's session until it expires it",
    pool: POOL,
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      // GitHub holds the dead session until the restarted operator has asked for one, however long
      // its start takes on a loaded machine; then, its last poll long past, it expires.
      ctx.world.github.actions.pinSession(id, true);
      await ctx.world.operator.kill();
      await ctx.world.kubectl(["-n", ctx.namespace, "patch", "impvmrunnerpool", ctx.pool, "--subresource=status", "--type=json", "-p", '[{"op":"remove","path":"/status/scaleSet/sessionId"}]']);
      ctx.faultNow();
      const job = queue(ctx, "conflict");
      const at = Date.now();
      await ctx.world.operator.start({});
      const conflictsSeen = (): number => ctx.world.github.requestsTo(/\/sessions$/, "POST").filter((r) => r.at >= at && r.status === 409).length;
      await waitFor("the restarted operator met 409", () => (conflictsSeen() >= 1 ? true : undefined), { timeoutMs: 300_000, intervalMs: 200 }).finally(() => ctx.world.github.actions.pinSession(id, false));
      const released = Date.now();
      const waited = await takenWithin(ctx, job, SESSION_IDLE_MS + 10_000 + BOOT_MS, released);
      const conflicts = conflictsSeen();
      assert.ok((await poolEvents(ctx)).includes("SessionConflict"), "and said so in a Warning Event on the pool");
      oneVmPerJob(ctx, 1);
      return `${conflicts} session create(s) answered 409 (ScaleSetListening False, reason SessionConflict, one Warning Event) until GitHub expired the dead session (${s(SESSION_IDLE_MS)} here); then the job was acquired; ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-refresh-404",
    injected: "GitHub drops the listener's session: the next poll is 401 and the refresh answers 404",
    where: "scale-set listener, Polling → Refreshing",
    pool: POOL,
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      const old = pool.status?.scaleSet?.sessionId;
      const at = Date.now();
      ctx.world.github.actions.dropSession(id);
      ctx.faultNow();
      const job = queue(ctx, "refresh-404");
      const waited = await takenWithin(ctx, job, 30_000 + BOOT_MS);
      const refreshes = ctx.world.github.requestsTo(/\/sessions\/[\w-]+$/, "PATCH").filter((r) => r.at >= at).map((r) => r.status);
      assert.ok(refreshes.includes(404), `the refresh answered 404 (got ${refreshes.join(", ")})`);
      const set = ctx.world.github.actions.scaleSets.get(id);
      assert.ok(set?.session !== undefined && set.session.id !== old, "a new session was opened");
      assert.ok((await poolEvents(ctx)).includes("SessionLost"));
      oneVmPerJob(ctx, 1);
      return `poll 401 → refresh ${refreshes.join(", ")} → SessionLost Warning → a new session; ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-queue-token-expiry",
    injected: "the listener's message queue token expires while a job waits in its queue",
    where: "scale-set listener, Polling: the long poll, the ack and acquirejobs all answer 401 until the session is refreshed",
    pool: POOL,
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      const session = ctx.world.github.actions.scaleSets.get(id)?.session?.id;
      const at = Date.now();
      ctx.world.github.actions.expireQueueTokens();
      ctx.faultNow();
      const job = queue(ctx, "token-expiry");
      const waited = await takenWithin(ctx, job, 30_000 + BOOT_MS);
      const refreshes = ctx.world.github.requestsTo(/\/sessions\/[\w-]+$/, "PATCH").filter((r) => r.at >= at && r.status === 200).length;
      assert.ok(refreshes >= 1, "the session was refreshed");
      assert.equal(ctx.world.github.actions.scaleSets.get(id)?.session?.id, session, "the same session, with a new token");
      oneVmPerJob(ctx, 1);
      return `401 → PATCH session (${refreshes}×, 200) → the same session with a new token; ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-message-redelivered-twice",
    injected: "the job's JobAvailable message is delivered twice more after the listener handled it",
    where: "scale-set listener, Polling: at-least-once delivery; handlers must be idempotent",
    pool: POOL,
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      const job = queue(ctx, "redelivered");
      await ctx.world.waitUntil(`${job.name} acquired`, () => (job.scaleSetId === id ? true : undefined), 60_000);
      ctx.world.github.actions.redeliver(id, job.id);
      ctx.world.github.actions.redeliver(id, job.id);
      ctx.faultNow();
      const waited = await takenWithin(ctx, job, BOOT_MS);
      await ctx.world.waitUntil("the duplicates handled", () => (ctx.world.github.actions.scaleSets.get(id)?.messages.length === 0 ? true : undefined), 60_000);
      oneVmPerJob(ctx, 1);
      return `three JobAvailable for one job: acquired once, demand one job (totalAssignedJobs, not a count of messages); ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-job-acquired-elsewhere",
    injected: "another scale set with the same labels acquires the job first (the pool's acquirejobs is delayed 5 s)",
    where: "scale-set listener, Polling: acquirejobs answers without the job",
    pool: POOL,
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      const rival = clientOf(ctx);
      const other = await rival.createScaleSet({ name: `${ctx.pool}-rival`, runnerGroupId: 1, labels: [{ type: "System", name: `${ctx.pool}-rival` }, { type: "System", name: ctx.pool }] });
      const session = await rival.createSession(other.id, "rival");
      ctx.world.github.injectFault({ kind: "delay", ms: 5_000, count: 1, path: new RegExp(`/runnerscalesets/${id}/acquirejobs$`), method: "POST" });
      const job = queue(ctx, "elsewhere");
      ctx.faultNow();
      const message = await rival.getMessage(session, 0, 1);
      assert.equal(message?.jobs[0]?.runnerRequestId, job.id);
      assert.deepEqual(await rival.acquireJobs(session, [job.id]), [job.id], "the rival got it");
      await ctx.world.waitUntil("the pool's listener handled the same JobAvailable", () => (ctx.world.github.actions.scaleSets.get(id)?.messages.length === 0 && ctx.world.github.requestsTo(new RegExp(`/runnerscalesets/${id}/acquirejobs$`), "POST").some((r) => r.status === 200) ? true : undefined), 60_000);
      const status = await ctx.world.waitUntil("the pool counts no demand", async () => {
        const st = (await poolOf(ctx)).status;
        return st?.scaleSet?.assignedJobs === 0 && st.desired === 0 ? st : undefined;
      }, 30_000);
      assert.equal(vmsSeen(ctx).length, 0, "no VM for a job another scale set holds");
      ctx.world.github.cancelJob(job.id);
      await rival.deleteSession(session);
      await rival.deleteScaleSet(other.id);
      const mine = queue(ctx, "mine");
      const waited = await takenWithin(ctx, mine, 30_000 + BOOT_MS);
      oneVmPerJob(ctx, 1);
      return `acquirejobs gave the pool nothing (the rival had it); status assignedJobs ${status.scaleSet?.assignedJobs ?? "?"}, desired ${status.desired ?? "?"}: no VM; the next job of its own was taken after ${s(waited)}; one VM in all`;
    },
  },
  {
    id: "scale-set-deleted-on-github",
    injected: "the pool's runner scale set is deleted on GitHub (as an admin would in the UI)",
    where: "scale-set listener, Polling: its queue and session go with the scale set",
    pool: POOL,
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      ctx.world.github.actions.deleteScaleSet(id);
      ctx.faultNow();
      const job = queue(ctx, "recreated");
      const waited = await takenWithin(ctx, job, 30_000 + BOOT_MS);
      const again = await listening(ctx);
      assert.notEqual(again.status?.scaleSet?.id, id, "a new scale set, recorded in the pool's status");
      assert.ok((await poolEvents(ctx)).includes("ScaleSetDeleted"));
      oneVmPerJob(ctx, 1);
      return `the listener found its session and scale set gone, created the scale set again (id ${id} → ${again.status?.scaleSet?.id ?? "?"}, Warning ScaleSetDeleted), and the job queued meanwhile reached it; ${job.name} waited ${s(waited)}; one VM`;
    },
  },
  {
    id: "scale-set-rerun-at-zero",
    injected: "a finished job is re-run (GitHub's \"Re-run job\": a new job id, run_attempt 2 of the same run) on a scale-set pool scaled to zero",
    where: "scale-set listener, Polling: no VM, the scale set's statistics at zero; the re-run's JobAvailable (the stall PyTorch's ARC fleet hit, pytorch/ci-infra #900)",
    pool: POOL,
    async run(ctx) {
      await listening(ctx);
      const first = queue(ctx, "rerun");
      await takenWithin(ctx, first, BOOT_MS);
      await ctx.world.waitUntil("the pool scaled to zero", async () => ((await ctx.world.listVms()).some((vm) => vm.metadata.namespace === ctx.namespace && !["Succeeded", "Failed"].includes(vm.status?.phase ?? "")) ? undefined : true), 180_000);
      const rerun = ctx.world.github.rerunJob(first.id);
      ctx.faultNow();
      assert.equal(rerun.runAttempt, 2);
      const waited = await takenWithin(ctx, rerun, 30_000 + BOOT_MS);
      oneVmPerJob(ctx, 2);
      return `job ${first.id} served and its VM ended; its re-run (job ${rerun.id}, attempt 2 of run ${rerun.runId}) reached the listener as a JobAvailable, was acquired and got a runner ${s(waited)} after it was queued; one VM per job`;
    },
  },
  {
    id: "scale-set-cluster-full-burst",
    injected: `${BURST} jobs queued at once for a scale-set pool of maxConcurrent ${BURST} while the cluster has room for 2 of its VMs (one node cordoned, the other's 2 VM slots)`,
    where: "scale-set listener, Polling: the capacity each poll tells GitHub (X-ScaleSetMaxCapacity) and what the pool acquires; the pool's status while jobs wait",
    pool: { minIdle: 0, maxConcurrent: BURST, scaleSet: true },
    bounds: { I2: 900_000 },
    async run(ctx) {
      const pool = await listening(ctx);
      const id = pool.status?.scaleSet?.id ?? 0;
      const set = ctx.world.github.actions.scaleSets.get(id);
      assert.ok(set !== undefined);
      const cordoned = ctx.world.nodes[1]?.name ?? "";
      await ctx.world.kubectl(["cordon", cordoned]);
      try {
        await ctx.world.waitUntil("the listener told GitHub the cordoned cluster's room: 2", () => (set.maxCapacity === 2 ? true : undefined), 60_000);
        const jobs = Array.from({ length: BURST }, (_, i) => queue(ctx, `burst-${i + 1}`));
        ctx.faultNow();
        const queuedAt = Date.now();
        let maxAssigned = 0;
        const saidBefore = set.capacities.length;
        /** The pool's VMs not ended: a job's new VM may wait to be placed while the VM of a job just finished still ends. */
        let maxLive = 0;
        let waitingSeen: { condition: string; available: number; capacity: number } | undefined;
        let lastStatusAt = 0;
        /** Each change of the capacity the polls said, with the jobs assigned then: what a failure shows. */
        const said: string[] = [];
        await ctx.world.waitUntil(`all ${BURST} jobs completed`, async () => {
          const assigned = ctx.world.github.actions.assignedTo(set);
          if (said.at(-1) !== `${set.maxCapacity ?? "?"}/${assigned}`) said.push(`${set.maxCapacity ?? "?"}/${assigned}`);
          maxAssigned = Math.max(maxAssigned, assigned);
          const live = [...ctx.world.seenVms].filter(([, h]) => h.last.metadata.namespace === ctx.namespace && h.last.status?.phase !== "Succeeded" && h.last.status?.phase !== "Failed" && h.last.metadata.deletionTimestamp === undefined).length;
          maxLive = Math.max(maxLive, live);
          if (waitingSeen === undefined && Date.now() - lastStatusAt > 2_000) {
            lastStatusAt = Date.now();
            const st = (await poolOf(ctx)).status;
            const c = st?.conditions?.find((x) => x.type === "ScalingLimited");
            if (c?.reason === "NodeCapacity" && (st?.scaleSet?.availableJobs ?? 0) > 0) waitingSeen = { condition: c.message ?? "", available: st?.scaleSet?.availableJobs ?? 0, capacity: st?.scaleSet?.capacity ?? -1 };
          }
          return jobs.every((j) => j.status === "completed") ? true : undefined;
        }, 900_000, 100);
        const took = Date.now() - queuedAt;
        for (const j of jobs) assert.equal(j.conclusion, "success", `${j.name}: ${j.result?.log ?? ""}`);
        // Every poll's header, as the server kept it (not samples): none above the cluster's room.
        const maxSaid = Math.max(...set.capacities.slice(saidBefore));
        assert.ok(maxSaid <= 2, `every poll said at most the cluster's room, 2 (said ${set.capacities.slice(saidBefore).join(", ")})`);
        assert.ok(maxAssigned <= 2, `GitHub never assigned the scale set more jobs than the cluster could place (at most ${maxAssigned}; capacity said/assigned: ${said.join(" ")}; VMs: ${[...ctx.world.seenVms].filter(([, h]) => h.last.metadata.namespace === ctx.namespace).map(([n, h]) => `${n}@${h.last.status?.nodeName ?? "-"}`).join(" ")})`);
        assert.ok(waitingSeen !== undefined, "the pool's status said jobs wait for node capacity (ScalingLimited=NodeCapacity, scaleSet.availableJobs)");
        assert.ok(waitingSeen.capacity >= 0 && waitingSeen.capacity <= 2, `and the capacity it told GitHub, at most the room (${waitingSeen.capacity})`);
        oneVmPerJob(ctx, BURST);
        return `${BURST} jobs for a pool of maxConcurrent ${BURST} on a cluster with room for 2: every poll said capacity ${maxSaid} or less, GitHub assigned at most ${maxAssigned} at once; the pool had at most ${maxLive} VMs not ended (new ones waiting while finished ones ended); the status said "${waitingSeen.condition.slice(0, 60)}…" (availableJobs ${waitingSeen.available}, capacity ${waitingSeen.capacity}); all ${BURST} succeeded as room freed, the last ${s(took)} after the burst; one VM per job`;
      } finally {
        await ctx.world.kubectl(["uncordon", cordoned]).catch(() => undefined);
      }
    },
  },
  {
    id: "scale-set-actions-5xx-60s",
    injected: "the Actions service answers 503 to everything for 60 s; a job is queued at its start",
    where: "scale-set listener, Polling, and the setup controller's generatejitconfig",
    pool: POOL,
    bounds: { I2: 420_000 },
    async run(ctx) {
      await listening(ctx);
      ctx.world.github.actions.failUntil = Date.now() + 60_000;
      ctx.faultNow();
      const job = queue(ctx, "outage");
      const waited = await takenWithin(ctx, job, 60_000 + 70_000 + BOOT_MS);
      assert.ok((await poolEvents(ctx)).includes("ActionsServiceUnavailable"), "the outage was a Warning on the pool");
      await listening(ctx);
      oneVmPerJob(ctx, 1);
      return `the listener backed off (capped at 60 s) with a Warning and ScaleSetListening False, kept its session, and acquired the job once the service answered; ${job.name} waited ${s(waited)} (60 s of it the outage); one VM`;
    },
  },
];

describe("failure proof: scale-set faults", { skip: unavailable, timeout: 3_600_000, concurrency: 1 }, () => {
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
