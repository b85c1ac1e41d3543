import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, ImpError } from "../shared/index.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";
import { LEASE_RESOURCE, type Lease } from "./lease-decision.ts";
import { Manager, type SyncedRunnable } from "./manager.ts";
import { Registry } from "prom-client";
import { Controller, DEFAULT_STOP_TIMEOUT_MS } from "./controller.ts";

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    if (check()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  assert.fail(`timed out waiting until ${what}`);
}

/** A part that records its lifecycle into `log`; a cache syncs when `sync()` is called. */
function part(name: string, log: string[]) {
  let synced = false;
  const syncWaiters: Array<() => void> = [];
  const runnable: SyncedRunnable & { sync(): void; fail?: (err: Error) => void } = {
    async start(signal) {
      log.push(`start ${name}`);
      await new Promise<void>((resolve, reject) => {
        runnable.fail = reject;
        signal.addEventListener("abort", () => resolve(), { once: true });
      });
      await new Promise<void>((resolve) => setImmediate(resolve));
      log.push(`stopped ${name}`);
    },
    waitForSync: () => (synced ? Promise.resolve() : new Promise<void>((resolve) => syncWaiters.push(resolve))),
    sync() {
      synced = true;
      for (const wake of syncWaiters.splice(0)) wake();
    },
  };
  return runnable;
}

describe("Manager", () => {
  it("starts caches, waits for sync, then controllers and servers; stops in reverse", async () => {
    const log: string[] = [];
    const cache = part("cache", log);
    const controller = part("controller", log);
    const server = part("server", log);
    const manager = new Manager().addCache(cache).addController(controller).addServer(server);
    const stop = new AbortController();
    const running = manager.start(stop.signal);
    await until(() => log.length === 1, "the cache starts");
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.deepEqual(log, ["start cache"], "nothing else starts before the cache has synced");
    cache.sync();
    await until(() => log.length === 3, "controller and server start");
    stop.abort();
    await running;
    assert.deepEqual(log, ["start cache", "start controller", "start server", "stopped server", "stopped controller", "stopped cache"]);
  });

  it("starts health servers before the caches and stops them last", async () => {
    const log: string[] = [];
    const cache = part("cache", log);
    const health = part("health", log);
    const controller = part("controller", log);
    const manager = new Manager().addCache(cache).addController(controller).addHealthServer(health);
    const stop = new AbortController();
    const running = manager.start(stop.signal);
    await until(() => log.length === 2, "health server and cache start");
    assert.deepEqual(log, ["start health", "start cache"], "the health server answers while caches sync");
    cache.sync();
    await until(() => log.length === 3, "the controller starts");
    stop.abort();
    await running;
    assert.deepEqual(log, ["start health", "start cache", "start controller", "stopped controller", "stopped cache", "stopped health"]);
  });

  it("stops everything and rejects when a part fails", async () => {
    const log: string[] = [];
    const cache = part("cache", log);
    const controller = part("controller", log);
    const manager = new Manager().addCache(cache).addController(controller);
    cache.sync();
    const running = manager.start(new AbortController().signal);
    await until(() => log.includes("start controller"), "the controller starts");
    controller.fail?.(new Error("boom"));
    await assert.rejects(running, /boom/);
    assert.ok(log.includes("stopped cache"));
  });

  it("runs controllers only while leading, and fails with LeadershipLost when the lease cannot be renewed", async () => {
    const clock = new FakeClock();
    const leases = new FakeResourceClient<Lease>(LEASE_RESOURCE);
    let cut = false;
    const client = {
      get: (ref: { namespace?: string | undefined; name: string }, signal?: AbortSignal) => (cut ? Promise.reject(new Error("partitioned")) : leases.get(ref, signal)),
      create: (obj: Lease, signal?: AbortSignal) => leases.create(obj, signal),
      patch: (ref: { namespace?: string | undefined; name: string }, p: Record<string, unknown>, signal?: AbortSignal) =>
        cut ? Promise.reject(new Error("partitioned")) : leases.patch(ref, p, signal),
    };
    const log: string[] = [];
    const cache = part("cache", log);
    cache.sync();
    const controller = part("controller", log);
    const manager = new Manager({
      leaderElection: { client, clock, namespace: "imp-system", name: "op", identity: "me", leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000, random: () => 0 },
    })
      .addCache(cache)
      .addController(controller);
    const running = manager.start(new AbortController().signal);
    await until(() => log.includes("start controller"), "the controller starts once leading");
    assert.equal(manager.isLeader(), true);
    cut = true;
    const outcome = running.then(() => "resolved", (err: unknown) => err);
    let result: unknown;
    void outcome.then((r) => (result = r));
    for (let i = 0; i < 30 && result === undefined; i++) {
      await clock.advance(1_000);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    await until(() => result !== undefined, "the manager stops");
    assert.ok(result instanceof ImpError && result.code === "LeadershipLost", `got ${String(result)}`);
    assert.ok(log.indexOf("stopped controller") < log.indexOf("stopped cache"));
  });

  it("a reconcile that never returns does not hold up stepping down when the lease cannot be renewed", async () => {
    const clock = new FakeClock();
    const leases = new FakeResourceClient<Lease>(LEASE_RESOURCE);
    let cut = false;
    const client = {
      get: (ref: { namespace?: string | undefined; name: string }, signal?: AbortSignal) => (cut ? Promise.reject(new Error("partitioned")) : leases.get(ref, signal)),
      create: (obj: Lease, signal?: AbortSignal) => leases.create(obj, signal),
      patch: (ref: { namespace?: string | undefined; name: string }, p: Record<string, unknown>, signal?: AbortSignal) =>
        cut ? Promise.reject(new Error("partitioned")) : leases.patch(ref, p, signal),
    };
    let stuck: AbortSignal | undefined;
    const controller = new Controller({
      name: "stuck",
      registry: new Registry(),
      clock,
      reconcile: (ctx) => {
        stuck = ctx.signal;
        return new Promise(() => undefined); // ignores its signal forever
      },
    });
    const cache = part("cache", []);
    cache.sync();
    const timings = { leaseDurationMs: 10_000, renewDeadlineMs: 6_000, retryPeriodMs: 1_500 };
    const manager = new Manager({ leaderElection: { client, clock, namespace: "imp-system", name: "op", identity: "me", ...timings, random: () => 0 } })
      .addCache(cache)
      .addController(controller);
    const running = manager.start(new AbortController().signal);
    await until(() => manager.isLeader(), "leading");
    controller.enqueue("k");
    await until(() => stuck !== undefined, "the reconcile is stuck");
    const lastRenewal = clock.now();
    cut = true;
    let result: unknown;
    void running.then(() => (result = "resolved"), (err: unknown) => (result = err));
    while (result === undefined && clock.now() - lastRenewal < 60_000) await clock.advance(100);
    assert.ok(result instanceof ImpError && result.code === "LeadershipLost", `got ${String(result)}`);
    assert.equal(stuck?.aborted, true);
    const steppedDownAfter = clock.now() - lastRenewal;
    assert.ok(
      steppedDownAfter <= timings.renewDeadlineMs + timings.retryPeriodMs + DEFAULT_STOP_TIMEOUT_MS + 100 && steppedDownAfter < timings.leaseDurationMs,
      `stepped down ${steppedDownAfter} ms after the last renewal, before anyone may take over at ${timings.leaseDurationMs} ms`,
    );
    assert.equal(controller.abandonedReconciles, 1);
  });
});
