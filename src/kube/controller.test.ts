import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { Registry } from "prom-client";
import { FakeClock, ImpError, conflictError, createLogger, retryableError, systemClock, terminalError } from "../shared/index.ts";
import { Controller, DEFAULT_RECONCILE_TIMEOUT_MS, DEFAULT_STOP_TIMEOUT_MS, generationChanged, ownerKeys, type ControllerOptions, type ReconcileContext } from "./controller.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";
import { CONFLICT_RETRY, mutateWithRetry } from "./mutate-with-retry.ts";
import type { EventHandlers } from "./informer.ts";
import type { KubeObject } from "./resource.ts";
import { decideRequeue, done, requeueAfter, type ReconcileResult } from "./reconcile-result.ts";

const backoff = { baseMs: 100, factor: 2, capMs: 10_000, jitter: 0, maxAttempts: Infinity };

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  assert.fail(`timed out waiting until ${what}`);
}

async function counterValue(registry: Registry, result: string): Promise<number> {
  const metric = await registry.getSingleMetric("imp_controller_reconcile_total")?.get();
  return metric?.values.find((v) => v.labels["result"] === result && v.labels["controller"] === "test")?.value ?? NaN;
}

function setup(reconcile: (ctx: ReconcileContext) => Promise<ReconcileResult>, workers = 2, extra: Partial<ControllerOptions> = {}) {
  const clock = new FakeClock();
  const registry = new Registry();
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split("\n")) if (line !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  });
  const logger = createLogger({ level: "debug", destination });
  const controller = new Controller({ name: "test", reconcile, registry, clock, backoff, workers, logger, ...extra });
  const stop = new AbortController();
  const running = controller.start(stop.signal);
  return { clock, registry, controller, stop, running, lines };
}

describe("decideRequeue()", () => {
  const table = [
    { name: "done forgets", attempt: { ok: true, result: done } as const, outcome: "success", action: "forget" },
    { name: "requeueAfter schedules", attempt: { ok: true, result: requeueAfter(5_000) } as const, outcome: "requeue_after", action: "forgetAndAddAfter" },
    { name: "terminal forgets", attempt: { ok: false, error: terminalError("Invalid", "x") } as const, outcome: "terminal", action: "forget" },
    { name: "a conflict that reaches the loop backs off (mutateWithRetry already retried it)", attempt: { ok: false, error: conflictError("Conflict", "x") } as const, outcome: "conflict", action: "addRateLimited" },
    { name: "retryable backs off", attempt: { ok: false, error: retryableError("NetworkError", "x") } as const, outcome: "error", action: "addRateLimited" },
    { name: "unknown errors back off", attempt: { ok: false, error: new Error("bug") } as const, outcome: "error", action: "addRateLimited" },
  ];
  for (const row of table) {
    it(`${row.name}`, () => {
      const decision = decideRequeue(row.attempt);
      assert.equal(decision.outcome, row.outcome);
      assert.equal(decision.action.kind, row.action);
    });
  }
});

describe("Controller", () => {
  it("reconciles an enqueued key once and counts a success", async () => {
    const seen: string[] = [];
    const { registry, controller, stop, running } = setup(async (ctx) => {
      seen.push(ctx.key);
      return done;
    });
    controller.enqueue("ns/a");
    controller.enqueue("ns/a");
    await until(() => seen.length === 1, "the key is reconciled");
    await until(() => controller.queueLength === 0, "the queue is empty");
    stop.abort();
    await running;
    assert.deepEqual(seen, ["ns/a"]);
    assert.equal(await counterValue(registry, "success"), 1);
    assert.equal(await counterValue(registry, "error"), 0, "result series are pre-registered at zero");
  });

  it("reconciles again after requeueAfter, on the clock", async () => {
    let calls = 0;
    const { clock, controller, stop, running } = setup(async () => {
      calls += 1;
      return calls === 1 ? requeueAfter(30_000) : done;
    });
    controller.enqueue("k");
    await until(() => calls === 1 && clock.pendingSleeps === 1, "the requeue is scheduled");
    await clock.advance(29_999);
    assert.equal(calls, 1);
    await clock.advance(1);
    await until(() => calls === 2, "the key is reconciled again");
    stop.abort();
    await running;
  });

  it("retries retryable errors with growing backoff and forgets after success", async () => {
    const times: number[] = [];
    const failures: number[] = [];
    const { clock, registry, controller, stop, running } = setup(async (ctx) => {
      times.push(clock.now());
      failures.push(ctx.failures);
      if (times.length <= 3) throw retryableError("NetworkError", "Cannot reach the API: refused");
      return done;
    });
    const start = clock.now();
    controller.enqueue("k");
    while (times.length < 4) {
      await until(() => clock.pendingSleeps > 0 || times.length >= 4, "a retry is scheduled");
      if (times.length >= 4) break;
      await clock.advance(50);
    }
    assert.deepEqual(times.map((t) => t - start), [0, 100, 300, 700]);
    assert.deepEqual(failures, [0, 1, 2, 3]);
    assert.equal(await counterValue(registry, "error"), 3);
    assert.equal(await counterValue(registry, "success"), 1);
    stop.abort();
    await running;
  });

  it("does not retry terminal errors", async () => {
    let calls = 0;
    const { clock, registry, controller, stop, running, lines } = setup(async () => {
      calls += 1;
      throw terminalError("Invalid", "Cannot reconcile ImpVM ns/a: spec.vcpu must be positive");
    });
    controller.enqueue("ns/a");
    await until(() => calls === 1, "the key is reconciled");
    await clock.advance(600_000);
    assert.equal(calls, 1);
    assert.equal(await counterValue(registry, "terminal"), 1);
    const logged = lines.find((l) => l["msg"] === "reconcile failed terminally; not retrying");
    assert.ok(logged, "the terminal error is logged");
    assert.equal(logged["controller"], "test");
    assert.equal(logged["key"], "ns/a");
    assert.equal(typeof logged["reconcileID"], "string");
    stop.abort();
    await running;
  });

  it("backs off a conflict that reaches the loop instead of retrying it at once", async () => {
    let calls = 0;
    const { clock, registry, controller, stop, running } = setup(async () => {
      calls += 1;
      if (calls === 1) throw conflictError("Conflict", "Cannot patch ConfigMap ns/a: modified");
      return done;
    });
    controller.enqueue("ns/a");
    await until(() => calls === 1 && clock.pendingSleeps === 1, "the conflict is scheduled for a retry");
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.equal(calls, 1, "no immediate second reconcile");
    await clock.advance(backoff.baseMs);
    await until(() => calls === 2, "the key is retried after its backoff");
    assert.equal(await counterValue(registry, "conflict"), 1);
    stop.abort();
    await running;
  });

  describe("one retry layer for conflicts: what one conflict costs", () => {
    type Thing = KubeObject & { spec?: { size?: number } };
    const things = { group: "imp.dev", version: "v1alpha1", plural: "things", kind: "Thing", namespaced: true };
    const ref = { namespace: "ns", name: "t" };
    // Fast but as many attempts as the shipped policy.
    const policy = { ...CONFLICT_RETRY, baseMs: 1, capMs: 2 };

    async function raced(competeOn: (attempt: number) => boolean) {
      const client = new FakeResourceClient<Thing>(things);
      await client.create({ metadata: { ...ref }, spec: { size: 0 } });
      let attempts = 0;
      let reconciles = 0;
      const harness = setup(async (ctx) => {
        reconciles += 1;
        await mutateWithRetry(client, {
          ref,
          clock: systemClock,
          policy,
          signal: ctx.signal,
          mutate: (draft) => {
            attempts += 1;
            // Another writer commits between this writer's GET and its PATCH: a real 409.
            if (competeOn(attempts)) void client.patch(ref, { metadata: { labels: { competitor: String(attempts) } } });
            draft.spec = { size: 1 };
          },
        });
        return done;
      });
      return { client, harness, attempts: () => attempts, reconciles: () => reconciles };
    }

    it("one conflict costs one more GET and PATCH, absorbed by mutateWithRetry; the reconcile runs once", async () => {
      const { client, harness, reconciles } = await raced((attempt) => attempt === 1);
      harness.controller.enqueue("ns/t");
      await until(() => reconciles() === 1 && harness.controller.queueLength === 0 && client.calls.patch === 3, "the write went through");
      await until(async () => (await counterValue(harness.registry, "success")) === 1, "the reconcile succeeded");
      assert.equal(client.calls.get, 2, "GETs: the first read and one fresh re-read");
      assert.equal(client.calls.patch - 1, 2, "PATCHes of the writer (the competitor's one not counted): the refused one and the retry");
      assert.equal(await counterValue(harness.registry, "conflict"), 0);
      assert.equal((await client.get(ref)).spec?.size, 1);
      harness.stop.abort();
      await harness.running;
    });

    it("`from`: a current cached copy costs no GET; a stale one costs the 409 it earns, then a fresh read, never a lost update", async () => {
      const client = new FakeResourceClient<Thing>(things);
      const created = await client.create({ metadata: { ...ref }, spec: { size: 0 } });
      const grow = (draft: Thing): void => void (draft.spec = { size: (draft.spec?.size ?? 0) + 1 });
      const first = await mutateWithRetry(client, { ref, clock: systemClock, policy, from: created, mutate: grow });
      assert.equal(client.calls.get, 0, "the cached copy was current: no GET");
      assert.equal(client.calls.patch, 1);
      assert.equal(first.spec?.size, 1);
      // `created` is stale now (first's write moved the resourceVersion on).
      const second = await mutateWithRetry(client, { ref, clock: systemClock, policy, from: created, mutate: grow });
      assert.equal(client.calls.patch, 3, "the stale copy's PATCH was refused (409), then the retry");
      assert.equal(client.calls.get, 1, "one fresh read after the refusal");
      assert.equal(second.spec?.size, 2, "applied to the fresh object: the first write is not lost");
    });

    it(`a persistent conflict costs ${CONFLICT_RETRY.maxAttempts} GET/PATCH pairs, then the key backs off`, async () => {
      let competing = true;
      const { client, harness, reconciles } = await raced(() => competing);
      harness.controller.enqueue("ns/t");
      await until(async () => (await counterValue(harness.registry, "conflict")) === 1, "mutateWithRetry gave up");
      assert.equal(client.calls.get, CONFLICT_RETRY.maxAttempts);
      assert.equal(client.calls.patch, 2 * CONFLICT_RETRY.maxAttempts, "each attempt: one competing PATCH, one refused PATCH");
      await new Promise<void>((resolve) => setImmediate(resolve));
      assert.equal(reconciles(), 1, "the loop does not add its own immediate retries");
      competing = false;
      await harness.clock.advance(backoff.baseMs);
      await until(async () => (await counterValue(harness.registry, "success")) === 1, "the retry after the backoff succeeded");
      assert.equal(reconciles(), 2);
      harness.stop.abort();
      await harness.running;
    });
  });

  describe("reconcile deadline", () => {
    it("aborts a reconcile that ignores its signal at the deadline, counts an error, releases the key and retries it", async () => {
      const signals: AbortSignal[] = [];
      const { clock, registry, controller, stop, running } = setup(async (ctx) => {
        signals.push(ctx.signal);
        if (signals.length === 1) return new Promise<ReconcileResult>(() => undefined); // never settles, ignores the signal
        return done;
      });
      controller.enqueue("k");
      await until(() => signals.length === 1 && clock.pendingSleeps === 1, "the reconcile runs under its deadline");
      await clock.advance(DEFAULT_RECONCILE_TIMEOUT_MS - 1);
      assert.equal(signals[0]?.aborted, false);
      await clock.advance(1);
      await until(() => signals[0]?.aborted === true, "the stuck reconcile's signal is aborted");
      const reason: unknown = signals[0]?.reason;
      assert.ok(reason instanceof ImpError && reason.code === "ReconcileTimeout" && reason.errorClass === "retryable", String(reason));
      assert.equal(await counterValue(registry, "error"), 1);
      assert.equal(controller.abandonedReconciles, 1);
      await clock.advance(backoff.baseMs);
      await until(() => signals.length === 2, "the same key is reconciled again although the first never returned");
      await until(async () => (await counterValue(registry, "success")) === 1, "the retry succeeded");
      stop.abort();
      await running; // not blocked by the abandoned reconcile
    });

    it("start() returns stopTimeoutMs after stop even if a reconcile never returns", async () => {
      let signal: AbortSignal | undefined;
      const { clock, controller, stop, running, lines } = setup(async (ctx) => {
        signal = ctx.signal;
        return new Promise<ReconcileResult>(() => undefined);
      });
      controller.enqueue("k");
      await until(() => signal !== undefined, "the reconcile is running");
      let stopped = false;
      const watcher = running.then(() => (stopped = true));
      stop.abort();
      assert.equal(signal?.aborted, true, "the reconcile is told to stop");
      await clock.advance(DEFAULT_STOP_TIMEOUT_MS - 1);
      assert.equal(stopped, false, "in-flight reconciles get the grace period");
      await clock.advance(1);
      await watcher;
      assert.equal(controller.abandonedReconciles, 1);
      assert.ok(lines.some((l) => l["msg"] === "reconcile abandoned: signal aborted, key released" && l["key"] === "k"));
    });
  });

  it("never runs one key concurrently and re-runs it once when it was enqueued meanwhile", async () => {
    let active = 0;
    let maxActive = 0;
    let calls = 0;
    let release: () => void = () => undefined;
    const { controller, stop, running } = setup(async () => {
      calls += 1;
      active += 1;
      maxActive = Math.max(maxActive, active);
      if (calls === 1) await new Promise<void>((resolve) => (release = resolve));
      active -= 1;
      return done;
    }, 4);
    controller.enqueue("k");
    await until(() => calls === 1, "the first reconcile runs");
    controller.enqueue("k");
    controller.enqueue("k");
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.equal(calls, 1);
    release();
    await until(() => calls === 2, "the key runs again after the first finished");
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.equal(calls, 2);
    assert.equal(maxActive, 1);
    stop.abort();
    await running;
  });

  it("start() resolves only after in-flight reconciles return", async () => {
    let release: () => void = () => undefined;
    let finished = false;
    let started = false;
    const { controller, stop, running } = setup(async (ctx) => {
      started = true;
      await new Promise<void>((resolve) => (release = resolve));
      finished = ctx.signal.aborted;
      return done;
    });
    controller.enqueue("k");
    await until(() => started, "the reconcile is running");
    let stopped = false;
    const watcher = running.then(() => (stopped = true));
    stop.abort();
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.equal(stopped, false);
    release();
    await watcher;
    assert.equal(finished, true, "the reconcile saw the stop signal");
  });
});

describe("ownerKeys()", () => {
  it("maps a child to its owners of one kind in the child's namespace", () => {
    const child = {
      metadata: {
        name: "vm-1-setup",
        namespace: "ci",
        ownerReferences: [
          { kind: "ImpVM", name: "vm-1", apiVersion: "imp.dev/v1alpha1", uid: "u1" },
          { kind: "Other", name: "x", apiVersion: "v1", uid: "u2" },
        ],
      },
    };
    assert.deepEqual(ownerKeys("ImpVM")(child), ["ci/vm-1"]);
    assert.deepEqual(ownerKeys("Other", false)(child), ["x"]);
  });
});

describe("Controller.watch()", () => {
  function fakeSource<T>() {
    let handlers: EventHandlers<T> = {};
    return {
      addEventHandler(h: EventHandlers<T>) {
        handlers = h;
        return () => (handlers = {});
      },
      emit: () => handlers,
    };
  }

  it("maps children to their owner's key and filters status-only updates with generationChanged", async () => {
    const reconciled: string[] = [];
    const { controller, stop, running } = setup(async (ctx) => {
      reconciled.push(ctx.key);
      return done;
    });
    const vms = fakeSource<KubeObject>();
    const secrets = fakeSource<KubeObject>();
    controller.watch(vms, { updateMatters: generationChanged });
    controller.watch(secrets, { toKeys: ownerKeys("ImpVM") });
    const v1 = { metadata: { name: "vm", namespace: "ci", generation: 1 } };
    const statusOnly = { metadata: { name: "vm", namespace: "ci", generation: 1 }, status: { phase: "Running" } };
    vms.emit().onUpdate?.(v1, statusOnly);
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.deepEqual(reconciled, [], "a status-only update is ignored");
    vms.emit().onUpdate?.(statusOnly, statusOnly);
    await until(() => reconciled.length === 1, "a resync passes the filter");
    secrets.emit().onDelete?.({ metadata: { name: "vm-setup", namespace: "ci", ownerReferences: [{ apiVersion: "imp.dev/v1alpha1", kind: "ImpVM", name: "vm", uid: "u-1" }] } });
    await until(() => reconciled.length === 2, "the owner is reconciled");
    assert.deepEqual(reconciled, ["ci/vm", "ci/vm"]);
    stop.abort();
    await running;
  });
});
