import { execFileSync } from "node:child_process";
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { GROUP, VERSION, type ImpVM, IMP_VMS, buildAllCrds } from "../../../src/api/index.ts";
import { CONFLICT_RETRY, Controller, EVENT_RESOURCE, EventRecorder, HealthServer, Informer, Manager, createResourceClient, done, isGone, keyOf, mutateWithRetry, parseKey, type CoreEvent, type KubeObject, type ResourceClient, type ResourceDescriptor, installCrds } from "../../../src/kube/index.ts";
import { ImpError, retryableError, waitFor } from "../../../src/shared/index.ts";
import { compactEtcd, etcdEndpoint, etcdRevision } from "./etcd.fixture.ts";

type ConfigMap = KubeObject & { data?: Record<string, string> };
type Node = KubeObject & { status?: { capacity?: Record<string, string> } };
const CONFIG_MAPS: ResourceDescriptor = { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true };
const NAMESPACES: ResourceDescriptor = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false };
const NODES: ResourceDescriptor = { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false };

/**
 * Ten writers on one object is a deliberate pile-up, beyond what the shipped `CONFLICT_RETRY` (5
 * attempts, then the controller's backoff) is sized for: each round at least one writer wins, so
 * ten attempts guarantee every writer gets through within this one call.
 */
const TEN_WRITER_RACE = { ...CONFLICT_RETRY, maxAttempts: 10 };

const rejectsWith = (errorClass: string, code: string) => (err: unknown): boolean => {
  assert.ok(err instanceof ImpError, `expected an ImpError, got ${String(err)}`);
  assert.equal(err.errorClass, errorClass);
  assert.equal(err.code, code);
  assert.match(err.message, /^Cannot /);
  return true;
};

/**
 * The real client, with a switch that breaks the informer's watch while the server stays up: the
 * open stream is cut (as a network failure) and new watches wait until `reconnect()`.
 */
function breakableWatches<T extends KubeObject>(client: ResourceClient<T>) {
  let cut: AbortController | undefined;
  let gate: { promise: Promise<void>; open: () => void } | undefined;
  let lists = 0;
  let resumedFrom: string | undefined;
  const wrapped: Pick<ResourceClient<T>, "resource" | "list" | "watch"> = {
    resource: client.resource,
    list: (options) => {
      lists += 1;
      return client.list(options);
    },
    async watch(options, onEvent) {
      if (gate !== undefined) await gate.promise;
      resumedFrom = options.resourceVersion;
      const mine = new AbortController();
      cut = mine;
      await client.watch({ ...options, signal: AbortSignal.any([options.signal, mine.signal]) }, onEvent);
      if (mine.signal.aborted && !options.signal.aborted) throw retryableError("NetworkError", "Cannot watch: connection cut by the test");
    },
  };
  return {
    client: wrapped,
    lists: () => lists,
    /** The resourceVersion the latest watch started from. */
    resumedFrom: () => resumedFrom,
    breakWatch(): void {
      let open = (): void => undefined;
      const promise = new Promise<void>((resolve) => (open = resolve));
      gate = { promise, open };
      cut?.abort();
    },
    reconnect(): void {
      gate?.open();
      gate = undefined;
    },
  };
}

describe("kube runtime against a real API server", () => {
  let plane: ControlPlane;
  let configMaps: ResourceClient<ConfigMap>;
  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    configMaps = createResourceClient<ConfigMap>(plane.kubeConfig, CONFIG_MAPS);
    const namespaces = createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES);
    for (const name of ["crud", "informer", "conflicts", "controller", "quiet", "paged", "expired"]) await namespaces.create({ metadata: { name } });
  });
  after(async () => {
    await plane?.stop();
  });

  describe("ResourceClient", () => {
    it("creates, reads, lists, patches and deletes a core kind", async () => {
      const created = await configMaps.create({ metadata: { name: "a", namespace: "crud" }, data: { k: "1" } });
      assert.equal(created.kind, "ConfigMap");
      const patched = await configMaps.patch({ namespace: "crud", name: "a" }, { data: { k: "2", extra: "x" } });
      assert.deepEqual(patched.data, { k: "2", extra: "x" });
      const removed = await configMaps.patch({ namespace: "crud", name: "a" }, { data: { extra: null } });
      assert.deepEqual(removed.data, { k: "2" });
      const listed = await configMaps.list({ namespace: "crud" });
      assert.ok(listed.items.some((o) => o.metadata?.name === "a" && o.kind === "ConfigMap"));
      assert.notEqual(listed.resourceVersion, "");
      await configMaps.delete({ namespace: "crud", name: "a" });
      await assert.rejects(configMaps.get({ namespace: "crud", name: "a" }), rejectsWith("terminal", "NotFound"));
    });

    it("lists across pages", async () => {
      for (let i = 0; i < 5; i++) await configMaps.create({ metadata: { name: `page-${i}`, namespace: "paged" } });
      const smallPages = createResourceClient<ConfigMap>(plane.kubeConfig, CONFIG_MAPS, { listPageSize: 2 });
      const listed = await smallPages.list({ namespace: "paged" });
      assert.deepEqual(listed.items.map((o) => o.metadata?.name).sort(), ["page-0", "page-1", "page-2", "page-3", "page-4"]);
      assert.notEqual(listed.resourceVersion, "");
    });

    it("classifies AlreadyExists, stale resourceVersion and invalid objects", async () => {
      const obj = await configMaps.create({ metadata: { name: "b", namespace: "crud" } });
      await assert.rejects(configMaps.create({ metadata: { name: "b", namespace: "crud" } }), rejectsWith("conflict", "AlreadyExists"));
      await configMaps.patch({ namespace: "crud", name: "b" }, { data: { moved: "on" } });
      await assert.rejects(
        configMaps.patch({ namespace: "crud", name: "b" }, { metadata: { resourceVersion: obj.metadata?.resourceVersion }, data: { stale: "x" } }),
        rejectsWith("conflict", "Conflict"),
      );
      await assert.rejects(configMaps.create({ metadata: { name: "Not_A_Name", namespace: "crud" } }), rejectsWith("terminal", "Invalid"));
    });

    it("writes status through the status subresource of a cluster-scoped kind", async () => {
      await plane.createNode("status-node");
      const nodes = createResourceClient<Node>(plane.kubeConfig, NODES);
      await nodes.patch({ name: "status-node" }, { status: { capacity: { "imp.dev/slots": "9" } } });
      assert.equal((await nodes.get({ name: "status-node" })).status?.capacity?.["imp.dev/slots"], undefined, "main-resource patches ignore status");
      await nodes.patchStatus({ name: "status-node" }, { status: { capacity: { "imp.dev/slots": "4" } } });
      assert.equal((await nodes.get({ name: "status-node" })).status?.capacity?.["imp.dev/slots"], "4");
    });
  });

  it("ResourceClient reuses connections instead of opening one per request", async () => {
    const port = new URL(plane.server).port;
    const ownConnections = (): number =>
      execFileSync("ss", ["-tnpH", "state", "all", `( dport = :${port} )`])
        .toString()
        .split("\n")
        .filter((line) => line.includes(`pid=${process.pid},`)).length;
    const namespaces = createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES);
    await namespaces.get({ name: "default" });
    const before = ownConnections();
    for (let i = 0; i < 50; i++) await namespaces.get({ name: "default" });
    const opened = ownConnections() - before;
    assert.ok(opened <= 1, `50 sequential GETs opened ${opened} new connections`);
  });

  describe("mutateWithRetry", () => {
    it("keeps all ten items when ten writers append to one list concurrently", async () => {
      await configMaps.create({ metadata: { name: "list", namespace: "conflicts" }, data: { items: "[]" } });
      const ref = { namespace: "conflicts", name: "list" };
      let attempts = 0;
      await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          mutateWithRetry(configMaps, {
            ref,
            policy: TEN_WRITER_RACE,
            mutate: (draft) => {
              attempts += 1;
              const items = JSON.parse(draft.data?.["items"] ?? "[]") as string[];
              draft.data = { ...draft.data, items: JSON.stringify([...items, `writer-${i}`]) };
            },
          }),
        ),
      );
      const items = JSON.parse((await configMaps.get(ref)).data?.["items"] ?? "[]") as string[];
      console.log(`10 concurrent writers: ${attempts} read-modify-write attempts in total`);
      assert.deepEqual([...items].sort(), Array.from({ length: 10 }, (_, i) => `writer-${i}`).sort());
    });
  });

  describe("mutateWithRetry on the status subresource", () => {
    it("keeps all ten conditions when ten writers add one each to an ImpVM's status concurrently", async () => {
      await installCrds(plane.kubeConfig, buildAllCrds());
      const vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
      const ref = { namespace: "conflicts", name: "status-race" };
      const created = await vms.create({
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "ImpVM",
        metadata: ref,
        spec: { templateRef: { name: "unused" }, lifecycle: "ephemeral" },
      });

      // The precondition holds on /status: a patch carrying an outdated resourceVersion is refused.
      await vms.patchStatus(ref, { status: { message: "moved on" } });
      await assert.rejects(
        vms.patchStatus(ref, { metadata: { resourceVersion: created.metadata?.resourceVersion }, status: { message: "stale" } }),
        rejectsWith("conflict", "Conflict"),
      );

      // Every writer's first read waits until all ten have read, so all ten start from the same
      // resourceVersion and at least nine must be refused and retried.
      const writers = 10;
      let firstReads = 0;
      let allRead = (): void => undefined;
      const barrier = new Promise<void>((resolve) => (allRead = resolve));
      const readFirst = new Set<number>();
      let attempts = 0;
      await Promise.all(
        Array.from({ length: writers }, (_, i) =>
          mutateWithRetry(
            {
              get: async (r, signal) => {
                const vm = await vms.get(r, signal);
                if (!readFirst.has(i)) {
                  readFirst.add(i);
                  if (++firstReads === writers) allRead();
                  await barrier;
                }
                return vm;
              },
              patch: (r, patch, signal) => vms.patch(r, patch, signal),
              patchStatus: (r, patch, signal) => vms.patchStatus(r, patch, signal),
            },
            {
              ref,
              subresource: "status",
              policy: TEN_WRITER_RACE,
              mutate: (draft) => {
                attempts += 1;
                const type = `Writer${i}`;
                const conditions = draft.status?.conditions ?? [];
                if (conditions.some((c) => c.type === type)) return false;
                draft.status = {
                  ...draft.status,
                  conditions: [
                    ...conditions,
                    { type, status: "True", reason: "Wrote", message: `writer ${i}`, lastTransitionTime: new Date().toISOString().replace(/\.\d{3}Z$/, "Z") },
                  ],
                };
              },
            },
          ),
        ),
      );
      const stored = await vms.get(ref);
      const types = (stored.status?.conditions ?? []).map((c) => c.type).sort();
      console.log(`10 concurrent status writers: ${attempts} read-modify-write attempts in total`);
      assert.deepEqual(types, Array.from({ length: writers }, (_, i) => `Writer${i}`).sort(), "no status write was lost");
      assert.equal(stored.status?.message, "moved on", "other status fields are untouched");
      assert.ok(attempts >= 2 * writers - 1, `conflicts must have happened: ${attempts} attempts for ${writers} writers`);
    });
  });

  describe("EventRecorder", () => {
    it("folds a repeated event into one core/v1 Event with count 2", async () => {
      const events = createResourceClient<CoreEvent>(plane.kubeConfig, EVENT_RESOURCE);
      const involved = await configMaps.create({ metadata: { name: "evented", namespace: "crud" } });
      const recorder = new EventRecorder({ client: events, component: "imp-test", instance: "test" });
      await recorder.record(involved, { type: "Warning", reason: "BootFailed", message: "guest did not answer" });
      await recorder.record(involved, { type: "Warning", reason: "BootFailed", message: "guest did not answer" });
      const { items } = await events.list({ namespace: "crud", fieldSelector: "involvedObject.name=evented" });
      assert.equal(items.length, 1);
      assert.equal(items[0]?.count, 2);
      assert.equal(items[0]?.reason, "BootFailed");
    });
  });

  describe("Controller under a Manager", () => {
    it("reconciles every object of a watched kind through the informer and work queue", async () => {
      const informer = new Informer<ConfigMap>({ client: configMaps, namespace: "controller" });
      const registry = new Registry();
      const controller = new Controller({
        name: "stamp",
        registry,
        reconcile: async (ctx) => {
          const { namespace, name } = parseKey(ctx.key);
          if (informer.get(ctx.key) === undefined) return done; // deleted: nothing to converge
          await mutateWithRetry(configMaps, {
            ref: { namespace, name },
            mutate: (draft) => {
              if (draft.data?.["stamped"] === "yes") return false;
              draft.data = { ...draft.data, stamped: "yes" };
              return true;
            },
            signal: ctx.signal,
          });
          return done;
        },
      });
      controller.watch(informer);
      const manager = new Manager().addCache(informer).addController(controller);
      const health = new HealthServer({ registry, caches: { configMaps: informer }, isLeader: () => manager.isLeader(), port: 0 });
      manager.addHealthServer(health);
      const stop = new AbortController();
      const running = manager.start(stop.signal);
      for (let i = 0; i < 5; i++) await configMaps.create({ metadata: { name: `cm-${i}`, namespace: "controller" } });
      await waitFor(
        "every ConfigMap is stamped",
        () => (informer.list().length === 5 && informer.list().every((o) => o.data?.["stamped"] === "yes") ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      const url = await health.listening();
      const ready = await fetch(`${url}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(await ready.json(), { ready: true, leader: true, caches: { configMaps: true } });
      const metrics = await (await fetch(`${url}/metrics`)).text();
      const successes = Number(/^imp_controller_reconcile_total\{controller="stamp",result="success"\} (\d+)$/m.exec(metrics)?.[1]);
      assert.ok(successes >= 5, `at least one successful reconcile per ConfigMap in /metrics, got ${successes}`);
      stop.abort();
      await running;
      await assert.rejects(fetch(`${url}/healthz`), "the health server stops with the manager");
    });
  });

  describe("Informer", () => {
    it("resumes watches the server ends on schedule without relisting or backing off", async () => {
      const informer = new Informer<ConfigMap>({ client: configMaps, namespace: "quiet", watchTimeoutSeconds: 2 });
      const stop = new AbortController();
      const running = informer.start(stop.signal);
      try {
        await informer.waitForSync(AbortSignal.timeout(60_000));
        await waitFor("three server-timed watches", () => (informer.stats().watches >= 4 ? true : undefined), { timeoutMs: 60_000 });
        await configMaps.create({ metadata: { name: "late", namespace: "quiet" } });
        await waitFor("the late object", () => informer.get("quiet/late"), { timeoutMs: 30_000 });
        const stats = informer.stats();
        assert.equal(stats.failures, 0, JSON.stringify(stats));
        assert.equal(stats.lists, 1, "resuming needs no relist");
      } finally {
        stop.abort();
        await running;
      }
    });

    it("relists after 410 Gone when its resume version expired while it was disconnected, and delivers the missed delete", async () => {
      const watches = breakableWatches(configMaps);
      const informer = new Informer<ConfigMap>({ client: watches.client, namespace: "expired" });
      const deleted: string[] = [];
      informer.addEventHandler({ onDelete: (obj) => deleted.push(keyOf(obj)) });
      const stop = new AbortController();
      const running = informer.start(stop.signal);
      const ref = (name: string) => ({ namespace: "expired", name });
      const contents = (): string =>
        JSON.stringify(Object.fromEntries(informer.list().map((o) => [o.metadata?.name ?? "", o.data?.["v"] ?? ""]).sort()));
      try {
        await configMaps.create({ metadata: ref("kept"), data: { v: "1" } });
        await configMaps.create({ metadata: ref("doomed"), data: { v: "1" } });
        await informer.waitForSync(AbortSignal.timeout(60_000));
        await waitFor("the first list", () => (informer.list().length === 2 ? true : undefined), { timeoutMs: 30_000 });
        await waitFor("the watch is open", () => (informer.isWatching() ? true : undefined), { timeoutMs: 30_000 });

        watches.breakWatch();
        await waitFor("the watch is down", () => (informer.isWatching() ? undefined : true), { timeoutMs: 10_000 });
        const staleVersion = watches.resumedFrom();
        assert.ok(staleVersion !== undefined && staleVersion !== "");
        await configMaps.patch(ref("kept"), { data: { v: "2" } });
        await configMaps.delete(ref("doomed"));
        await configMaps.create({ metadata: ref("born"), data: { v: "1" } });

        // Make the informer's resume version really expire. Measured on this apiserver: compacting
        // etcd alone is not enough, the watch cache still serves the window from memory; a restart
        // rebuilds the watch cache from etcd at the current revision, after which older versions
        // get "too old resource version" (410). Compaction makes etcd refuse them as well.
        const etcd = etcdEndpoint(plane);
        const revision = await etcdRevision(etcd);
        assert.ok(revision > Number(staleVersion), `etcd revision ${revision} is past the informer's ${staleVersion}`);
        await plane.stopApiServer();
        await compactEtcd(etcd, revision);
        await plane.startApiServer();
        await assert.rejects(
          configMaps.watch({ namespace: "expired", resourceVersion: staleVersion, timeoutSeconds: 5, signal: AbortSignal.timeout(30_000) }, () => undefined),
          (err: unknown) => isGone(err),
          "a watch from the informer's version is refused with 410 Gone",
        );

        const before = informer.stats();
        watches.reconnect();
        await waitFor("the cache converges after the relist", () => (contents() === JSON.stringify({ born: "1", kept: "2" }) ? true : undefined), {
          timeoutMs: 90_000,
          intervalMs: 100,
        });
        const after = informer.stats();
        console.log(`informer across a compacted resourceVersion: before ${JSON.stringify(before)}, after ${JSON.stringify(after)}`);
        assert.equal(after.expired - before.expired, 1, "exactly one watch ended in 410 Gone");
        assert.equal(after.lists - before.lists, 1, "which caused exactly one relist");
        assert.deepEqual(deleted, ["expired/doomed"], "the delete missed while disconnected is delivered by the relist");
        await waitFor("the watch is open again", () => (informer.isWatching() ? true : undefined), { timeoutMs: 60_000 });
        assert.notEqual(watches.resumedFrom(), staleVersion);
      } finally {
        stop.abort();
        await running;
      }
    });

    it("converges after its watch is broken while the server is up, and after an API server restart", async () => {
      const watches = breakableWatches(configMaps);
      const informer = new Informer<ConfigMap>({ client: watches.client, namespace: "informer" });
      const stop = new AbortController();
      const running = informer.start(stop.signal);
      const ref = (name: string) => ({ namespace: "informer", name });
      const names = (): string[] => informer.list().map((o) => keyOf(o)).sort();
      const converged = async (what: string, expected: Record<string, string>): Promise<void> => {
        await waitFor(
          what,
          () => {
            const actual = Object.fromEntries(informer.list().map((o) => [o.metadata?.name ?? "", o.data?.["v"] ?? ""]));
            return JSON.stringify(actual, Object.keys(actual).sort()) === JSON.stringify(expected, Object.keys(expected).sort()) ? true : undefined;
          },
          { timeoutMs: 90_000, intervalMs: 100 },
        );
      };
      try {
        await configMaps.create({ metadata: ref("one"), data: { v: "1" } });
        await configMaps.create({ metadata: ref("two"), data: { v: "1" } });
        await informer.waitForSync(AbortSignal.timeout(60_000));
        await converged("the first list", { one: "1", two: "1" });

        // Watch broken, server up: changes made now reach the cache when the watch resumes.
        watches.breakWatch();
        await waitFor("the watch is down", () => (informer.isWatching() ? undefined : true), { timeoutMs: 10_000 });
        await configMaps.patch(ref("one"), { data: { v: "2" } });
        await configMaps.delete(ref("two"));
        await configMaps.create({ metadata: ref("three"), data: { v: "1" } });
        assert.deepEqual(names(), ["informer/one", "informer/two"], "the cache cannot know yet");
        watches.reconnect();
        await converged("changes made while the watch was broken", { one: "2", three: "1" });

        // API server restart: every connection drops; changes after the restart must arrive.
        const listsBefore = watches.lists();
        await plane.stopApiServer();
        await assert.rejects(configMaps.get(ref("one")), rejectsWith("retryable", "NetworkError"));
        await plane.startApiServer();
        await configMaps.patch(ref("one"), { data: { v: "3" } });
        await configMaps.delete(ref("three"));
        await configMaps.create({ metadata: ref("four"), data: { v: "1" } });
        await converged("changes made after the restart", { one: "3", four: "1" });
        console.log(`informer after restart: ${watches.lists() - listsBefore} relist(s) (410 Gone ⇒ relist; 0 ⇒ resumed from its resourceVersion)`);
        assert.ok((informer.lastEventAt() ?? 0) > Date.now() - 60_000, "the health signal moved");
        await waitFor("the watch is open again", () => (informer.isWatching() ? true : undefined), { timeoutMs: 60_000 });
      } finally {
        stop.abort();
        await running;
      }
    });
  });
});
