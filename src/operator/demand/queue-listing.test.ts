import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import type { QueuedJob } from "../../forge/index.ts";
import type { ReconcileContext } from "../../kube/index.ts";
import { FakeClock, silentLogger } from "../../shared/index.ts";
import { DemandTally } from "./demand-tally.ts";
import { QueueListing } from "./queue-listing.ts";
import { RunnerActivity } from "./runner-activity.ts";

/** A Gitea pool whose demand is its listing of queued jobs (no webhook), every 5 s. */
const pool = {
  apiVersion: API_VERSION,
  kind: "ImpVMRunnerPool",
  metadata: { name: "tea", namespace: "ns", uid: "u-tea" },
  spec: { templateName: "runner", minIdle: 0, maxConcurrent: 2, scaleUpStep: 5, runnerCommand: ["/runner/run.sh"], gitea: { url: "http://127.0.0.1:9", credentialsSecretRef: { name: "gitea-token" }, scope: "repo", repository: "acme/web", labels: ["imp"] } },
} as unknown as ImpVMRunnerPool & { metadata: { name: string; namespace: string; uid: string } };
const vm = { metadata: { name: "tea-bcdfg", namespace: "ns" }, status: { phase: "Running" } } as unknown as ImpVM;
const job: QueuedJob = { id: 7, labels: ["imp"], repository: "acme/web" };

function harness(): { listing: QueueListing; ledger: RunnerActivity; clock: FakeClock; waiting: QueuedJob[]; lists: () => number; observe: () => Promise<void> } {
  const clock = new FakeClock(Date.parse("2026-12-07T12:00:00Z"));
  const ledger = new RunnerActivity(clock);
  const waiting: QueuedJob[] = [];
  let lists = 0;
  const listing = new QueueListing({
    poolCache: { list: () => [pool] },
    forges: { forPool: async () => ({ kind: "gitea", listScopeQueuedJobs: async () => (lists++, [...waiting]) }) as never },
    ledger: () => ledger,
    tally: new DemandTally(new Registry(), () => undefined),
    clock,
    listingIntervalMs: 5_000,
    backstopIntervalMs: 30_000,
  });
  const ctx = { key: "ns/tea", signal: new AbortController().signal, logger: silentLogger } as unknown as ReconcileContext;
  return { listing, ledger, clock, waiting, lists: () => lists, observe: () => listing.observe(ctx, pool as never, [vm] as never) };
}

describe("QueueListing", () => {
  it("lists again, before its interval, once a runner of the pool is seen busy with a job no signal named: the job it took no longer counts beside it", async () => {
    const h = harness();
    h.waiting.push(job);
    await h.observe();
    assert.equal(h.ledger.queuedJobs("ns/tea"), 1, "job 7 waits");
    // The VM's runner takes job 7; a runner list sees it busy before any listing or delivery says which job.
    h.waiting.length = 0;
    await h.clock.advance(1_000);
    h.ledger.runnersListed([{ name: "tea-bcdfg", busy: true }], h.clock.now());
    await h.clock.advance(100);
    await h.observe();
    assert.equal(h.lists(), 2, "listed again 1.1 s after the last listing, although its interval is 5 s");
    assert.equal(h.ledger.queuedJobs("ns/tea"), 0, "job 7 is no longer counted beside the runner that took it");
    // Still busy with that job: the next look waits for the interval again.
    h.ledger.runnersListed([{ name: "tea-bcdfg", busy: true }], h.clock.now());
    await h.clock.advance(100);
    await h.observe();
    assert.equal(h.lists(), 2, "the same busy runner does not make it list again");
  });

  it("a removal refused as busy in the very millisecond of the last listing still makes it list again (an order, not a clock)", async () => {
    const h = harness();
    h.waiting.push(job);
    await h.observe();
    h.waiting.length = 0;
    h.ledger.runnerBusy("tea-bcdfg", true, false);
    await h.observe();
    assert.equal(h.lists(), 2);
    assert.equal(h.ledger.queuedJobs("ns/tea"), 0);
  });

  it("a runner whose job a delivery named does not make it list again", async () => {
    const h = harness();
    h.waiting.push(job);
    await h.observe();
    await h.clock.advance(1_000);
    h.ledger.jobTaken(7);
    h.ledger.runnerBusy("tea-bcdfg", true);
    h.ledger.runnersListed([{ name: "tea-bcdfg", busy: true }], h.clock.now());
    await h.clock.advance(100);
    await h.observe();
    assert.equal(h.lists(), 1);
    assert.equal(h.ledger.queuedJobs("ns/tea"), 0);
  });
});

describe("RunnerActivity: a busy runner's job, named or not", () => {
  it("a list marks busy with an unknown job from when it was first seen; a delivery naming the job clears it; idle clears it", async () => {
    const clock = new FakeClock();
    const a = new RunnerActivity(clock);
    const before = a.sequence();
    a.runnersListed([{ name: "r", busy: true }], clock.now());
    const first = a.busyWithUnknownJobSince("r");
    assert.ok(first !== undefined && first > before, "recorded after what a listing before it saw");
    await clock.advance(1_000);
    a.runnersListed([{ name: "r", busy: true }], clock.now());
    assert.equal(a.busyWithUnknownJobSince("r"), first, "from when it was first seen busy");
    a.runnerBusy("r", true);
    assert.equal(a.busyWithUnknownJobSince("r"), undefined, "a delivery named its job");
    a.runnersListed([{ name: "r", busy: true }], clock.now());
    assert.equal(a.busyWithUnknownJobSince("r"), undefined, "a list confirming it busy does not forget the job is known");
    a.runnersListed([{ name: "r", busy: false }], clock.now());
    assert.equal(a.busyWithUnknownJobSince("r"), undefined);
    a.runnerBusy("s", true, false);
    assert.ok((a.busyWithUnknownJobSince("s") ?? 0) > (first ?? 0), "a refused removal, even in the same millisecond: busy, its job unknown, seen after the list");
    a.runnerFinished("t");
    a.runnersListed([{ name: "t", busy: true }], clock.now());
    assert.equal(a.busyWithUnknownJobSince("t"), undefined, "a finished runner a late list shows busy: its job is known (it completed)");
  });
});
