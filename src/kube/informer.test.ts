import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { createLogger, FakeClock, retryableError } from "../shared/index.ts";
import { FakeResourceClient } from "./fake-resource-client.ts";
import { Informer, labelIndex } from "./informer.ts";
import type { KubeObject, ResourceDescriptor } from "./resource.ts";
import type { ResourceClient } from "./resource-client.ts";

const configMaps: ResourceDescriptor = { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true };
type ConfigMap = KubeObject & { data?: Record<string, string> };
const policy = { baseMs: 1_000, factor: 2, capMs: 30_000, jitter: 0, maxAttempts: Infinity };

const cm = (name: string, value = "v"): ConfigMap => ({ metadata: { name, namespace: "ns" }, data: { value } });

/** Runs pending continuations until `check` holds (bounded, so a broken test fails instead of hanging). */
async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    if (check()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  assert.fail(`timed out waiting until ${what}`);
}

function setup(resyncPeriodMs = 0) {
  const clock = new FakeClock();
  const client = new FakeResourceClient<ConfigMap>(configMaps);
  const informer = new Informer<ConfigMap>({ client, clock, backoff: policy, resyncPeriodMs });
  const events: string[] = [];
  informer.addEventHandler({
    onAdd: (o) => events.push(`add ${o.metadata?.name}`),
    onUpdate: (old, o) => events.push(`update ${o.metadata?.name}${old === o ? " (resync)" : ""}`),
    onDelete: (o) => events.push(`delete ${o.metadata?.name}`),
  });
  const stop = new AbortController();
  const running = informer.start(stop.signal);
  return { clock, client, informer, events, stop, running };
}

describe("Informer", () => {
  it("lists, reports synced and delivers existing objects as adds", async () => {
    const client0 = new FakeResourceClient<ConfigMap>(configMaps);
    await client0.create(cm("a"));
    const informer = new Informer<ConfigMap>({ client: client0, clock: new FakeClock(), backoff: policy });
    const added: string[] = [];
    informer.addEventHandler({ onAdd: (o) => added.push(o.metadata?.name ?? "") });
    assert.equal(informer.hasSynced(), false);
    const stop = new AbortController();
    const running = informer.start(stop.signal);
    await informer.waitForSync(AbortSignal.timeout(5_000));
    assert.equal(informer.hasSynced(), true);
    assert.deepEqual(added, ["a"]);
    assert.equal(informer.get("ns/a")?.data?.["value"], "v");
    stop.abort();
    await running;
  });

  it("applies watch events to the cache and tells handlers", async () => {
    const { client, informer, events, stop, running } = setup();
    await informer.waitForSync(AbortSignal.timeout(5_000));
    await until(() => client.openWatches === 1, "the watch is open");
    await client.create(cm("a"));
    await client.patch({ namespace: "ns", name: "a" }, { data: { value: "w" } });
    await client.delete({ namespace: "ns", name: "a" });
    await client.create(cm("b"));
    assert.deepEqual(events, ["add a", "update a", "delete a", "add b"]);
    assert.deepEqual(informer.list().map((o) => o.metadata?.name), ["b"]);
    assert.notEqual(informer.lastEventAt(), undefined);
    stop.abort();
    await running;
  });

  it("keeps no managedFields in the cache, from the list or from the watch", async () => {
    const managedFields = [{ manager: "kubectl", operation: "Update", fieldsType: "FieldsV1", fieldsV1: { "f:data": { "f:value": {} } } }];
    const client = new FakeResourceClient<ConfigMap>(configMaps);
    await client.create({ ...cm("listed"), metadata: { name: "listed", namespace: "ns", managedFields } });
    const informer = new Informer<ConfigMap>({ client, clock: new FakeClock(), backoff: policy });
    const handed: ConfigMap[] = [];
    informer.addEventHandler({ onAdd: (o) => handed.push(o as ConfigMap) });
    const stop = new AbortController();
    const running = informer.start(stop.signal);
    await informer.waitForSync(AbortSignal.timeout(5_000));
    await until(() => client.openWatches === 1, "the watch is open");
    await client.create({ ...cm("watched"), metadata: { name: "watched", namespace: "ns", managedFields } });
    await until(() => informer.get("ns/watched") !== undefined, "the watched object is cached");
    assert.deepEqual((await client.get({ namespace: "ns", name: "listed" }))?.metadata?.managedFields, managedFields, "the fake keeps them, like the API server");
    for (const name of ["listed", "watched"]) {
      const cached = informer.get(`ns/${name}`);
      assert.equal(cached?.data?.["value"], "v", `${name}: the rest of the object is kept`);
      assert.equal(cached?.metadata?.name, name);
      assert.equal(cached?.metadata !== undefined && "managedFields" in cached.metadata, false, `${name}: managedFields dropped`);
    }
    assert.deepEqual(handed.map((o) => "managedFields" in (o.metadata ?? {})), [false, false], "handlers see the stripped objects");
    stop.abort();
    await running;
  });

  describe("when the watch drops", () => {
    it("reconnects after 1 s from the last version and sees changes made meanwhile", async () => {
      const { clock, client, informer, events, stop, running } = setup();
      await informer.waitForSync(AbortSignal.timeout(5_000));
      await until(() => client.openWatches === 1, "the watch is open");
      client.dropWatches(retryableError("NetworkError", "connection reset"));
      await until(() => clock.pendingSleeps === 1, "the informer backs off");
      await client.create(cm("made-while-down"));
      await clock.advance(999);
      assert.equal(client.openWatches, 0, "no reconnect before the 1 s backoff");
      await clock.advance(1);
      await until(() => client.openWatches === 1, "the watch is reopened");
      assert.deepEqual(events, ["add made-while-down"]);
      assert.equal(client.calls.list, 1, "a resumable watch needs no relist");
      stop.abort();
      await running;
    });

    it("backs off 1 s, 2 s, 4 s on repeated failures and resets after an event", async () => {
      const { clock, client, informer, stop, running } = setup();
      await informer.waitForSync(AbortSignal.timeout(5_000));
      await until(() => client.openWatches === 1, "the watch is open");
      client.failNext("watch", retryableError("NetworkError", "refused"));
      client.failNext("watch", retryableError("NetworkError", "refused"));
      client.dropWatches(retryableError("NetworkError", "reset"));
      const reconnectDelays: number[] = [];
      for (let i = 0; i < 3; i++) {
        await until(() => clock.pendingSleeps === 1, "the informer backs off");
        const before = client.calls.watch;
        const from = clock.now();
        while (client.calls.watch === before) await clock.advance(100);
        reconnectDelays.push(clock.now() - from);
      }
      assert.deepEqual(reconnectDelays, [1_000, 2_000, 4_000]);
      await until(() => client.openWatches === 1, "the watch is open again");
      await client.create(cm("event"));
      client.dropWatches(retryableError("NetworkError", "reset"));
      await until(() => clock.pendingSleeps === 1, "the informer backs off");
      const from = clock.now();
      const before = client.calls.watch;
      while (client.calls.watch === before) await clock.advance(100);
      assert.equal(clock.now() - from, 1_000, "an event resets the backoff");
      stop.abort();
      await running;
    });
  });

  describe("when the resume version has expired (410 Gone)", () => {
    it("relists and turns the difference into adds, updates and deletes", async () => {
      const { clock, client, informer, events, stop, running } = setup();
      await client.create(cm("kept"));
      await client.create(cm("changed"));
      await client.create(cm("removed"));
      await informer.waitForSync(AbortSignal.timeout(5_000));
      await until(() => client.openWatches === 1, "the watch is open");
      events.length = 0;
      client.dropWatches(retryableError("NetworkError", "reset"));
      await until(() => clock.pendingSleeps === 1, "the informer backs off");
      await client.patch({ namespace: "ns", name: "changed" }, { data: { value: "new" } });
      await client.delete({ namespace: "ns", name: "removed" });
      await client.create(cm("added"));
      client.compact();
      await clock.advance(1_000);
      await until(() => client.openWatches === 1, "the watch is reopened after the relist");
      assert.equal(client.calls.list, 2);
      assert.deepEqual(informer.stats(), { lists: 2, watches: 3, failures: 2, expired: 1 });
      assert.deepEqual(events.sort(), ["add added", "delete removed", "update changed"]);
      assert.deepEqual(informer.list().map((o) => o.metadata?.name).sort(), ["added", "changed", "kept"]);
      stop.abort();
      await running;
    });
  });

  it("leaves out a watched object without a name or uid, loudly, and keeps watching", async () => {
    const inner = new FakeResourceClient<ConfigMap>(configMaps);
    const lines: string[] = [];
    const logger = createLogger({ level: "error", destination: new Writable({ write: (chunk: Buffer, _e, done) => (lines.push(chunk.toString()), done()) }) });
    // A proxy that strips the uid of one object on its way through the watch.
    const client: Pick<ResourceClient<ConfigMap>, "resource" | "list" | "watch"> = {
      resource: configMaps,
      list: (o) => inner.list(o),
      watch: (o, onEvent) => inner.watch(o, (type, obj) => onEvent(type, obj.metadata?.name === "bad" ? { ...obj, metadata: { ...obj.metadata, uid: "" } } : obj)),
    };
    const informer = new Informer<ConfigMap>({ client, clock: new FakeClock(), backoff: policy, logger });
    const stop = new AbortController();
    const running = informer.start(stop.signal);
    await informer.waitForSync(AbortSignal.timeout(5_000));
    await until(() => inner.openWatches === 1, "the watch is open");
    await inner.create(cm("bad"));
    await inner.create(cm("good"));
    await until(() => informer.get("ns/good") !== undefined, "the good object is cached");
    assert.equal(informer.get("ns/bad"), undefined, "the object without a uid is not cached");
    assert.deepEqual(lines.map((l) => (JSON.parse(l) as { msg: string }).msg), ["watch event without a stored object's name or uid; skipped"]);
    assert.deepEqual({ watches: informer.stats().watches, failures: informer.stats().failures }, { watches: 1, failures: 0 }, "the watch went on");
    stop.abort();
    await running;
  });

  it("re-delivers every cached object as an update each resync period", async () => {
    const { clock, client, informer, events, stop, running } = setup(60_000);
    await client.create(cm("a"));
    await informer.waitForSync(AbortSignal.timeout(5_000));
    events.length = 0;
    await clock.advance(60_000);
    assert.deepEqual(events, ["update a (resync)"]);
    stop.abort();
    await running;
  });

  it("reports syncing, then ok, then stale when the API stays silent", async () => {
    const { clock, client, informer, stop, running } = setup();
    assert.equal(informer.health(75_000).status, "syncing");
    await informer.waitForSync(AbortSignal.timeout(5_000));
    assert.equal(informer.health(75_000).status, "ok");
    await until(() => client.openWatches === 1, "the watch is open");
    // Every reconnect within the next 76 s fails (backoff 1+2+4+8+16+30 s).
    for (let i = 0; i < 7; i++) client.failNext("watch", retryableError("NetworkError", "refused"));
    client.dropWatches(retryableError("NetworkError", "reset"));
    await clock.advance(76_000);
    const health = informer.health(75_000);
    assert.equal(health.status, "stale");
    assert.ok((health.silentForMs ?? 0) > 75_000);
    stop.abort();
    await running;
  });

  it("replays the cache as adds to a handler added after sync, and survives a throwing handler", async () => {
    const { client, informer, stop, running } = setup();
    await client.create(cm("a"));
    await informer.waitForSync(AbortSignal.timeout(5_000));
    const late: string[] = [];
    informer.addEventHandler({ onAdd: (o) => late.push(o.metadata?.name ?? "") });
    informer.addEventHandler({
      onAdd: () => {
        throw new Error("handler bug");
      },
    });
    assert.deepEqual(late, ["a"]);
    await until(() => client.openWatches === 1, "the watch is open");
    await client.create(cm("b"));
    assert.deepEqual(late, ["a", "b"], "a throwing handler neither stops the watch nor other handlers");
    stop.abort();
    await running;
  });

  it("resolves start() once stopped and closes the watch", async () => {
    const { client, informer, stop, running } = setup();
    await informer.waitForSync(AbortSignal.timeout(5_000));
    await until(() => client.openWatches === 1, "the watch is open");
    stop.abort();
    await running;
    assert.equal(client.openWatches, 0);
    assert.equal(informer.isWatching(), false);
  });
});

describe("Informer indexes", () => {
  type VM = KubeObject & { status?: { nodeName?: string } };
  const vms: ResourceDescriptor = { group: "imp.dev", version: "v1alpha1", plural: "impvms", kind: "ImpVM", namespaced: true };
  const vm = (name: string, node: string | undefined, pool: string): VM => ({
    metadata: { name, namespace: "ci", labels: { "imp.dev/pool": pool } },
    ...(node === undefined ? {} : { status: { nodeName: node } }),
  });
  /** Creates, then sets status through its subresource (a create drops status, as on the API server). */
  async function createVm(client: FakeResourceClient<VM>, name: string, node: string | undefined, pool: string): Promise<void> {
    const created = vm(name, node, pool);
    await client.create(created);
    if (created.status !== undefined) await client.patchStatus({ namespace: "ci", name }, { status: created.status });
  }
  const names = (objs: readonly { readonly metadata?: { readonly name?: string } }[]): string[] => objs.map((o) => o.metadata?.name ?? "");

  it("finds VMs by status.nodeName and by the pool label, and follows updates and deletes", async () => {
    const client = new FakeResourceClient<VM>(vms);
    await createVm(client, "a", "node-a", "small");
    await createVm(client, "b", "node-b", "small");
    await createVm(client, "c", undefined, "large");
    const informer = new Informer<VM>({ client, clock: new FakeClock(), backoff: policy });
    informer.addIndex("byNode", (o) => [o.status?.nodeName]);
    const stop = new AbortController();
    const running = informer.start(stop.signal);
    await informer.waitForSync(AbortSignal.timeout(5_000));
    informer.addIndex("byPool", labelIndex("imp.dev/pool")); // added after sync: built from the cache
    assert.deepEqual(names(informer.byIndex("byNode", "node-a")), ["a"]);
    assert.deepEqual(names(informer.byIndex("byPool", "small")), ["a", "b"]);
    assert.deepEqual(informer.indexKeys("byPool", "large"), ["ci/c"]);
    assert.deepEqual(informer.byIndex("byNode", "node-z"), []);

    await until(() => client.openWatches === 1, "the watch is open");
    await client.patchStatus({ namespace: "ci", name: "c" }, { status: { nodeName: "node-a" } });
    await client.patch({ namespace: "ci", name: "a" }, { metadata: { labels: { "imp.dev/pool": "large" } } });
    await until(() => informer.byIndex("byNode", "node-a").length === 2, "c moved onto node-a");
    await until(() => informer.byIndex("byPool", "large").length === 2, "a moved to the large pool");
    assert.deepEqual(names(informer.byIndex("byPool", "small")), ["b"]);
    await client.delete({ namespace: "ci", name: "a" });
    await until(() => informer.byIndex("byNode", "node-a").length === 1, "a's entries are gone");
    assert.deepEqual(names(informer.byIndex("byPool", "large")), ["c"]);
    assert.throws(() => informer.addIndex("byNode", () => []), /already exists/);
    assert.throws(() => informer.byIndex("nope", "x"), /no such index/);
    stop.abort();
    await running;
  });

  it("hands out frozen objects: the cache cannot be edited in place, a structuredClone can", async () => {
    const client = new FakeResourceClient<VM>(vms);
    await createVm(client, "a", "node-a", "small");
    const informer = new Informer<VM>({ client, clock: new FakeClock(), backoff: policy });
    const handed: unknown[] = [];
    informer.addEventHandler({ onAdd: (o) => handed.push(o) });
    const stop = new AbortController();
    const running = informer.start(stop.signal);
    await informer.waitForSync(AbortSignal.timeout(5_000));
    const cached = informer.get("ci/a");
    assert.ok(cached);
    assert.equal(handed[0], cached, "handlers get the cache's own object");
    // @ts-expect-error the type forbids writes (tsc fails if this line ever compiles)
    assert.throws(() => (cached.status!.nodeName = "node-x"), TypeError);
    // @ts-expect-error arrays are read-only too
    assert.throws(() => (cached.metadata!.finalizers = []), TypeError);
    assert.throws(() => ((cached as VM).metadata!.labels!["imp.dev/pool"] = "x"), TypeError, "a cast does not get around the freeze");
    assert.equal(informer.get("ci/a")?.status?.nodeName, "node-a");
    const copy = structuredClone(cached) as VM;
    copy.status = { nodeName: "node-b" };
    assert.equal(copy.status.nodeName, "node-b");
    stop.abort();
    await running;
  });
});
