/**
 * The fault point pool.before-replace fires before each VM the pool controller creates: with the
 * second create failing there (a crash stand-in for that reconcile), the retried reconcile still
 * ends with exactly minIdle VMs — the expectations keep the first create from being repeated. The
 * creates go out in slow-start batches (1, 2, 4 at once): a failure inside a batch keeps its
 * batch-mates and starts no further batch.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, LABELS, type ImpVM, type ImpVMRunnerPool } from "../../api/index.ts";
import { EVENT_RESOURCE, EventRecorder, FakeResourceClient, Informer, labelIndex, type CoreEvent } from "../../kube/index.ts";
import { FaultPoints, parseFaultPlan, silentLogger, waitFor } from "../../shared/index.ts";
import { PoolForges } from "../forges/index.ts";
import { PoolController } from "./pool-controller.ts";
import { IMP_VM_RUNNER_POOLS, IMP_VMS, SECRETS, type SecretObject } from "../resources.ts";

const pool: ImpVMRunnerPool = {
  apiVersion: API_VERSION,
  kind: "ImpVMRunnerPool",
  metadata: { name: "p", namespace: "ns" },
  spec: {
    templateName: "runner",
    github: { credentialsSecretRef: { name: "app" }, apiURL: "http://127.0.0.1:9", scope: "repo", repository: "acme/web", runnerGroup: "Default", labels: ["imp"] },
    minIdle: 2,
    maxConcurrent: 4,
    scaleUpStep: 5,
    runnerCommand: ["/runner/run.sh"],
  },
};

async function reconciles(registry: Registry): Promise<number> {
  const metric = await registry.getSingleMetric("imp_controller_reconcile_total")?.get();
  return (metric?.values ?? []).reduce((n, v) => n + v.value, 0);
}

/** A pool of `minIdle` VMs run to its size under `plan`; then three more reconciles. */
async function runPool(minIdle: number, plan: string) {
  const stop = new AbortController();
  const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
  const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
  const events = new FakeResourceClient<CoreEvent>(EVENT_RESOURCE);
  await pools.create({ ...pool, spec: { ...pool.spec, minIdle, maxConcurrent: minIdle + 2 } });
  const poolCache = new Informer({ client: pools });
  const vmCache = new Informer({ client: vms });
  vmCache.addIndex("imp-operator/vm-by-pool", labelIndex(LABELS.pool));
  void poolCache.start(stop.signal);
  void vmCache.start(stop.signal);
  await poolCache.waitForSync(stop.signal);
  await vmCache.waitForSync(stop.signal);
  const registry = new Registry();
  const fired: string[] = [];
  const faults = new FaultPoints(parseFaultPlan(plan), (point, action) => fired.push(`${point}=${action.kind}`));
  const controller = new PoolController({
    pools,
    vms,
    poolCache,
    vmCache,
    forges: new PoolForges({ secrets: new FakeResourceClient<SecretObject>(SECRETS), logger: silentLogger }),
    recorder: new EventRecorder({ client: events, component: "test", instance: "test" }),
    registry,
    logger: silentLogger,
    faults,
  });
  const running = controller.controller.start(stop.signal);
  try {
    controller.controller.enqueue("ns/p");
    await waitFor("minIdle VMs", async () => ((await vms.list({ namespace: "ns" })).items.length >= minIdle ? true : undefined), { timeoutMs: 30_000, intervalMs: 20 });
    const hitsToSize = faults.hits("pool.before-replace");
    // More reconciles: still minIdle, the failed attempt left nothing half-made.
    for (let round = 1; round <= 3; round++) {
      const before = await reconciles(registry);
      controller.controller.enqueue("ns/p");
      await waitFor(`reconcile ${round}`, async () => ((await reconciles(registry)) > before ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
    }
    const scaledUp = (await events.list({ namespace: "ns" })).items.filter((e) => e.reason === "ScaledUp").map((e) => e.message.replace(/;.*/, ""));
    return { fired, hitsToSize, vms: (await vms.list({ namespace: "ns" })).items.length, scaledUp };
  } finally {
    stop.abort();
    await running.catch(() => undefined);
  }
}

describe("PoolController at fault point pool.before-replace", () => {
  it("pool.before-replace=fail@2: the second create fails there, the retry creates it, minIdle VMs in the end", async () => {
    const r = await runPool(2, "pool.before-replace=fail@2");
    assert.deepEqual(r.fired, ["pool.before-replace=fail"], "the fault acted once, at the second create");
    assert.equal(r.hitsToSize, 3, "create 1, create 2 (failed there), create 2 again");
    assert.equal(r.vms, 2);
    assert.deepEqual(r.scaledUp, ["Created 1 runner VM(s)", "Created 1 runner VM(s)"]);
  });

  it("pool.before-replace=fail@3 inside a batch: its batch-mate is created, no batch after it starts, the retry makes up the rest, minIdle VMs", async () => {
    // Creates go out 1, then 2 at once, then 4: the third create fails beside the second.
    const r = await runPool(6, "pool.before-replace=fail@3");
    assert.deepEqual(r.fired, ["pool.before-replace=fail"]);
    assert.equal(r.hitsToSize, 3 + 4, "creates 1–3 (3 failed; nothing after its batch), then the retry's 4");
    assert.equal(r.vms, 6, "exactly minIdle: the expectations counted the two created before the failure");
    assert.deepEqual(r.scaledUp, ["Created 2 runner VM(s)", "Created 4 runner VM(s)"], "the VMs created before the failure are reported too");
  });
});
