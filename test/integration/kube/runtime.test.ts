import { execFileSync } from "node:child_process";
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import {
  Controller,
  EVENT_RESOURCE,
  EventRecorder,
  Informer,
  Manager,
  createResourceClient,
  done,
  keyOf,
  mutateWithRetry,
  parseKey,
  type CoreEvent,
  type KubeObject,
  type ResourceClient,
  type ResourceDescriptor,
} from "../../../src/kube/index.ts";
import { ImpError, retryableError, waitFor } from "../../../src/shared/index.ts";

type ConfigMap = KubeObject & { data?: Record<string, string> };
type Node = KubeObject & { status?: { capacity?: Record<string, string> } };
const CONFIG_MAPS: ResourceDescriptor = { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true };
const NAMESPACES: ResourceDescriptor = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false };
const NODES: ResourceDescriptor = { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false };

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
  const wrapped: Pick<ResourceClient<T>, "resource" | "list" | "watch"> = {
    resource: client.resource,
    list: (options) => {
      lists += 1;
      return client.list(options);
    },
    async watch(options, onEvent) {
      if (gate !== undefined) await gate.promise;
      const mine = new AbortController();
      cut = mine;
      await client.watch({ ...options, signal: AbortSignal.any([options.signal, mine.signal]) }, onEvent);
      if (mine.signal.aborted && !options.signal.aborted) throw retryableError("NetworkError", "Cannot watch: connection cut by the test");
    },
  };
  return {
    client: wrapped,
    lists: () => lists,
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
    for (const name of ["crud", "informer", "conflicts", "controller", "quiet", "paged"]) await namespaces.create({ metadata: { name } });
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
      const controller = new Controller({
        name: "stamp",
        registry: new Registry(),
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
      const stop = new AbortController();
      const running = manager.start(stop.signal);
      for (let i = 0; i < 5; i++) await configMaps.create({ metadata: { name: `cm-${i}`, namespace: "controller" } });
      await waitFor(
        "every ConfigMap is stamped",
        () => (informer.list().length === 5 && informer.list().every((o) => o.data?.["stamped"] === "yes") ? true : undefined),
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      stop.abort();
      await running;
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
