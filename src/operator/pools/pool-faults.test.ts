/**
 * The fault point pool.before-replace fires before each VM the pool controller creates: with the
 * second create failing there (a crash stand-in for that reconcile), the retried reconcile still
 * ends with exactly minIdle VMs — the expectations keep the first create from being repeated.
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

describe("PoolController at fault point pool.before-replace", () => {
  it("pool.before-replace=fail@2: the second create fails there, the retry creates it, minIdle VMs in the end", async () => {
    const stop = new AbortController();
    const pools = new FakeResourceClient<ImpVMRunnerPool>(IMP_VM_RUNNER_POOLS);
    const vms = new FakeResourceClient<ImpVM>(IMP_VMS);
    await pools.create(pool);
    const poolCache = new Informer({ client: pools });
    const vmCache = new Informer({ client: vms });
    vmCache.addIndex("imp-operator/vm-by-pool", labelIndex(LABELS.pool));
    void poolCache.start(stop.signal);
    void vmCache.start(stop.signal);
    await poolCache.waitForSync(stop.signal);
    await vmCache.waitForSync(stop.signal);
    const registry = new Registry();
    const fired: string[] = [];
    const faults = new FaultPoints(parseFaultPlan("pool.before-replace=fail@2"), (point, action) => fired.push(`${point}=${action.kind}`));
    const controller = new PoolController({
      pools,
      vms,
      poolCache,
      vmCache,
      forges: new PoolForges({ secrets: new FakeResourceClient<SecretObject>(SECRETS), logger: silentLogger }),
      recorder: new EventRecorder({ client: new FakeResourceClient<CoreEvent>(EVENT_RESOURCE), component: "test", instance: "test" }),
      registry,
      logger: silentLogger,
      faults,
    });
    const running = controller.controller.start(stop.signal);
    try {
      controller.controller.enqueue("ns/p");
      await waitFor("minIdle VMs", async () => ((await vms.list({ namespace: "ns" })).items.length >= 2 ? true : undefined), { timeoutMs: 30_000, intervalMs: 20 });
      assert.deepEqual(fired, ["pool.before-replace=fail"], "the fault acted once, at the second create");
      assert.equal(faults.hits("pool.before-replace"), 3, "create 1, create 2 (failed there), create 2 again");
      // More reconciles: still two, the failed attempt left nothing half-made.
      for (let round = 1; round <= 3; round++) {
        const before = await reconciles(registry);
        controller.controller.enqueue("ns/p");
        await waitFor(`reconcile ${round}`, async () => ((await reconciles(registry)) > before ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
      }
      assert.equal((await vms.list({ namespace: "ns" })).items.length, 2);
    } finally {
      stop.abort();
      await running.catch(() => undefined);
    }
  });
});
