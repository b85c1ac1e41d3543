import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, retryableError } from "../shared/index.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";
import { LEASE_RESOURCE, type Lease } from "./lease-decision.ts";
import { LeaderElector } from "./leader-elector.ts";
import type { ResourceClient } from "./resource-client.ts";

const timings = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    if (check()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  assert.fail(`timed out waiting until ${what}`);
}

/** The shared fake apiserver as one process sees it; `cut` simulates a network partition. */
function processView(server: FakeResourceClient<Lease>) {
  const view = { cut: false };
  const guard = <A extends unknown[], R>(fn: (...args: A) => Promise<R>) => (...args: A): Promise<R> =>
    view.cut ? Promise.reject(retryableError("NetworkError", "Cannot reach the API: partitioned")) : fn(...args);
  const client: Pick<ResourceClient<Lease>, "get" | "create" | "patch"> = {
    get: guard((ref, signal) => server.get(ref, signal)),
    create: guard((obj, signal) => server.create(obj, signal)),
    patch: guard((ref, patch, signal) => server.patch(ref, patch, signal)),
  };
  return { view, client };
}

function candidate(server: FakeResourceClient<Lease>, clock: FakeClock, identity: string) {
  const { view, client } = processView(server);
  const log: string[] = [];
  let leaderSignal: AbortSignal | undefined;
  const elector = new LeaderElector({
    ...timings,
    client,
    clock,
    identity,
    namespace: "imp-system",
    name: "operator",
    random: () => 0,
    onStartedLeading: async (signal) => {
      leaderSignal = signal;
      log.push("started");
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    },
    onStoppedLeading: (reason) => log.push(`stopped:${reason}`),
  });
  const stop = new AbortController();
  const running = elector.start(stop.signal);
  return { elector, view, log, stop, running, leaderSignal: () => leaderSignal };
}

async function advanceUntil(clock: FakeClock, check: () => boolean, limitMs: number): Promise<number> {
  const from = clock.now();
  while (!check()) {
    if (clock.now() - from > limitMs) assert.fail(`condition not reached within ${limitMs} ms of fake time`);
    await clock.advance(100);
  }
  return clock.now() - from;
}

describe("LeaderElector", () => {
  it("lets exactly one of two candidates lead", async () => {
    const clock = new FakeClock();
    const server = new FakeResourceClient<Lease>(LEASE_RESOURCE);
    const a = candidate(server, clock, "a");
    await until(() => a.elector.isLeader(), "a leads");
    const b = candidate(server, clock, "b");
    for (let i = 0; i < 100; i++) await clock.advance(1_000);
    assert.equal(a.elector.isLeader(), true);
    assert.equal(b.elector.isLeader(), false);
    assert.equal(b.elector.observedHolder(), "a");
    a.stop.abort();
    b.stop.abort();
    await Promise.all([a.running, b.running]);
  });

  it("hands over at once when the leader stops and releases the lease", async () => {
    const clock = new FakeClock();
    const server = new FakeResourceClient<Lease>(LEASE_RESOURCE);
    const a = candidate(server, clock, "a");
    await until(() => a.elector.isLeader(), "a leads");
    const b = candidate(server, clock, "b");
    await clock.advance(4_000);
    a.stop.abort();
    await a.running;
    assert.deepEqual(a.log, ["started", "stopped:stopped"]);
    assert.equal(a.leaderSignal()?.aborted, true, "the leader's work was stopped");
    const waited = await advanceUntil(clock, () => b.elector.isLeader(), 30_000);
    assert.ok(waited <= timings.retryPeriodMs * 1.2 + 100, `b took ${waited} ms of fake time`);
    b.stop.abort();
    await b.running;
  });

  describe("when the leader is cut off from the API", () => {
    it("stops leading after the renew deadline, and the other takes over only after that", async () => {
      const clock = new FakeClock();
      const server = new FakeResourceClient<Lease>(LEASE_RESOURCE);
      const a = candidate(server, clock, "a");
      await until(() => a.elector.isLeader(), "a leads");
      const b = candidate(server, clock, "b");
      await clock.advance(4_000);
      a.view.cut = true;
      const cutAt = clock.now();
      let aStoppedAt: number | undefined;
      let bLeadAt: number | undefined;
      await advanceUntil(
        clock,
        () => {
          if (aStoppedAt === undefined && !a.elector.isLeader()) aStoppedAt = clock.now();
          if (bLeadAt === undefined && b.elector.isLeader()) bLeadAt = clock.now();
          return aStoppedAt !== undefined && bLeadAt !== undefined;
        },
        60_000,
      );
      await a.running;
      assert.deepEqual(a.log, ["started", "stopped:lost"]);
      assert.ok(aStoppedAt !== undefined && bLeadAt !== undefined);
      assert.ok(aStoppedAt - cutAt <= timings.renewDeadlineMs + timings.retryPeriodMs * 1.2, "a gives up within the renew deadline");
      assert.ok(aStoppedAt < bLeadAt, "never two leaders: a stopped before b started");
      b.stop.abort();
      await b.running;
    });
  });
});
