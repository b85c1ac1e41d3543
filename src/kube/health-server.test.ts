import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Registry } from "prom-client";
import { ImpError } from "../shared/index.ts";
import { Controller } from "./controller.ts";
import { HealthServer } from "./health-server.ts";
import { done } from "./reconcile-result.ts";

function cache() {
  let synced = false;
  return { hasSynced: () => synced, sync: () => void (synced = true) };
}

describe("HealthServer", () => {
  it("serves liveness, readiness with per-cache state and leadership, and the metrics registry", async () => {
    const registry = new Registry();
    new Controller({ name: "impvm", registry, reconcile: async () => done });
    const vms = cache();
    const nodes = cache();
    let leader = false;
    const server = new HealthServer({ registry, caches: { vms, nodes }, isLeader: () => leader, port: 0 });
    const stop = new AbortController();
    const running = server.start(stop.signal);
    const url = await server.listening();
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(server.url(), url);

    const live = await fetch(`${url}/healthz`);
    assert.equal(live.status, 200);
    assert.equal(await live.text(), "ok\n");

    const notReady = await fetch(`${url}/readyz`);
    assert.equal(notReady.status, 503);
    assert.deepEqual(await notReady.json(), { ready: false, leader: false, caches: { vms: false, nodes: false } });
    vms.sync();
    assert.equal((await fetch(`${url}/readyz`)).status, 503, "one cache synced is not enough");
    nodes.sync();
    leader = true;
    const ready = await fetch(`${url}/readyz`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { ready: true, leader: true, caches: { vms: true, nodes: true } });

    const metrics = await fetch(`${url}/metrics`);
    assert.equal(metrics.status, 200);
    assert.equal(metrics.headers.get("content-type"), registry.contentType);
    assert.match(await metrics.text(), /^imp_controller_reconcile_total\{controller="impvm",result="success"\} 0$/m);

    assert.equal((await fetch(`${url}/nope`)).status, 404);
    const post = await fetch(`${url}/healthz`, { method: "POST" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");

    stop.abort();
    await running;
    await assert.rejects(fetch(`${url}/healthz`), "the port is closed after stop");
  });

  it("reports a port that is taken as a retryable error from start()", async () => {
    const first = new HealthServer({ registry: new Registry(), port: 0 });
    const stop = new AbortController();
    const running = first.start(stop.signal);
    const port = Number(new URL(await first.listening()).port);
    const second = new HealthServer({ registry: new Registry(), port });
    await assert.rejects(second.start(stop.signal), (err: unknown) => {
      assert.ok(err instanceof ImpError);
      assert.equal(err.code, "HealthServerListenFailed");
      assert.equal(err.errorClass, "retryable");
      assert.match(err.message, /^Cannot listen on 127\.0\.0\.1:\d+: .*EADDRINUSE/);
      return true;
    });
    stop.abort();
    await running;
  });
});
