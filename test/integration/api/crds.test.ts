/**
 * The Imp CRDs against a real kube-apiserver (+ kube-controller-manager for garbage collection):
 * they install and become Established, the samples are accepted, defaults are applied, invalid
 * objects are rejected by the server with the offending field named, and a setup Secret owned by
 * an ImpVM is garbage-collected with it.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { ApiException, ApiextensionsV1Api, CoreV1Api } from "@kubernetes/client-node";
import { API_VERSION, buildAllCrds, LABELS, type ImpVMStatus } from "../../../src/api/index.ts";
import { installCrds } from "../../../src/kube/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { ImpError } from "../../../src/shared/index.ts";
import { clone, ImpClient, rejection } from "./imp-client.ts";
import { CREATE_CASES, UPDATE_CASES } from "./invalid-cases.ts";
import { loadSamples, sample } from "./samples.ts";

const execFileAsync = promisify(execFile);
const NAMESPACE = "api-test";
let cp: ControlPlane;
let imp: ImpClient;
let core: CoreV1Api;

before(async () => {
  cp = await startControlPlane({ controllerManager: true });
  core = cp.kubeConfig.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
  imp = new ImpClient(cp.kubeConfig, NAMESPACE);
});

after(async () => {
  await cp?.stop();
});

describe("installCrds()", () => {
  test("installCrds() creates every Imp CRD and waits until each is Established", async () => {
    const results = await installCrds(cp.kubeConfig, buildAllCrds(), { timeoutMs: 60_000 });
    assert.deepEqual(results.map((r) => r.action), ["created", "created", "created", "created", "created"]);
    const ext = cp.kubeConfig.makeApiClient(ApiextensionsV1Api);
    for (const crd of buildAllCrds()) {
      const served = await ext.readCustomResourceDefinition({ name: crd.metadata.name });
      const established = served.status?.conditions?.find((c) => c.type === "Established");
      assert.equal(established?.status, "True", `${crd.metadata.name} is Established`);
    }
  });

  test("installCrds() replaces existing CRDs when run again", async () => {
    const results = await installCrds(cp.kubeConfig, buildAllCrds(), { timeoutMs: 60_000 });
    assert.deepEqual(results.map((r) => r.action), ["replaced", "replaced", "replaced", "replaced", "replaced"]);
  });

  test("installCrds() fails with a terminal error carrying the server's reason when a CRD is rejected", async () => {
    const [vmCrd] = buildAllCrds().filter((c) => c.spec.names.kind === "ImpVM");
    assert.ok(vmCrd);
    const broken = structuredClone(vmCrd);
    broken.metadata.name = "brokens.imp.dev";
    broken.spec.names = { ...broken.spec.names, kind: "Broken", listKind: "BrokenList", plural: "brokens", singular: "broken", shortNames: ["brk"] };
    // The first generated schema made this mistake: a fieldPath must name a field the schema declares.
    broken.spec.versions[0]!.schema.openAPIV3Schema["x-kubernetes-validations"] = [{ rule: "true", message: "m", fieldPath: ".spec.noSuchField" }];
    await assert.rejects(installCrds(cp.kubeConfig, [broken], { timeoutMs: 10_000 }), (err: unknown) => {
      assert.ok(err instanceof ImpError, String(err));
      assert.equal(err.code, "CrdRejected");
      assert.equal(err.errorClass, "terminal");
      assert.match(err.message, /fieldPath: Invalid value: "\.spec\.noSuchField": must be a valid path/);
      return true;
    });
  });

  test("the served CRD keeps the CEL rules, printer columns and selectable fields it was built with", async () => {
    const ext = cp.kubeConfig.makeApiClient(ApiextensionsV1Api);
    const served = await ext.readCustomResourceDefinition({ name: "impvms.imp.dev" });
    const version = served.spec.versions[0];
    const spec = version?.schema?.openAPIV3Schema?.properties?.["spec"];
    assert.ok(spec?.x_kubernetes_validations?.some((v) => v.rule === "self == oldSelf"), "spec immutability rule is served");
    assert.deepEqual(version?.additionalPrinterColumns?.map((c) => c.name), ["Phase", "Node", "Pool", "Reason", "Setup", "Boot-ms", "From", "Exit", "IP", "Age"]);
    assert.deepEqual(version?.selectableFields?.map((f) => f.jsonPath), [".status.nodeName", ".status.phase"]);
    assert.deepEqual(served.spec.names.shortNames, ["ivm"]);
    assert.deepEqual(served.spec.names.categories, ["imp"]);
    // How busy a pool is, at a glance: WAITING is the jobs waiting for a runner of it.
    const pools = (await ext.readCustomResourceDefinition({ name: "impvmrunnerpools.imp.dev" })).spec.versions[0]?.additionalPrinterColumns;
    assert.deepEqual(pools?.map((c) => `${c.name}=${c.jsonPath}`), ["Template=.spec.templateName", "Min-Idle=.spec.minIdle", "Max=.spec.maxConcurrent", "Idle=.status.idle", "Busy=.status.busy", "Waiting=.status.queuedJobs", "Starting=.status.starting", "Failed=.status.failed", 'Ready=.status.conditions[?(@.type=="Ready")].status', "Age=.metadata.creationTimestamp"]);
  });
});

describe("valid objects", () => {
  test("every sample in deploy/samples is accepted", async () => {
    const samples = loadSamples();
    assert.ok(samples.size >= 5);
    for (const [file, obj] of samples) {
      const created = await imp.create(obj).catch((err: unknown) => {
        throw new Error(`sample ${file} was rejected: ${err instanceof ApiException ? String(err.body) : String(err)}`);
      });
      assert.equal(created.metadata.name, obj.metadata.name);
    }
  });

  test("the API server applies defaults to omitted fields", async () => {
    const cls = await imp.create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "bare" }, spec: { vcpu: 1, memoryMiB: 256 } });
    assert.deepEqual(cls.spec, { vcpu: 1, memoryMiB: 256, scratchDisk: "4Gi", arch: "amd64", startFrom: "Boot" });

    const tpl = await imp.create({
      apiVersion: API_VERSION, kind: "ImpVMTemplate", metadata: { name: "bare" },
      spec: { classRef: { name: "bare" }, image: "alpine:3.20", network: {} },
    });
    assert.deepEqual(tpl.spec, { classRef: { name: "bare" }, image: "alpine:3.20", network: { egress: "internet" }, kernel: "default", expireAfter: "6h" });

    const vm = await imp.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "bare" }, spec: { templateRef: { name: "bare" } } });
    assert.equal((vm.spec as { lifecycle: string }).lifecycle, "ephemeral");

    const pool = await imp.create({
      apiVersion: API_VERSION, kind: "ImpVMRunnerPool", metadata: { name: "bare" },
      spec: {
        templateName: "bare",
        github: { credentialsSecretRef: { name: "app" }, scope: "repo", repository: "example/app", labels: ["imp"] },
        webhook: {},
        runnerCommand: ["/run.sh"],
      },
    });
    assert.deepEqual(pool.spec, {
      templateName: "bare",
      github: { credentialsSecretRef: { name: "app" }, scope: "repo", repository: "example/app", labels: ["imp"], apiURL: "https://api.github.com", runnerGroup: "Default" },
      webhook: { enabled: false },
      runnerCommand: ["/run.sh"],
      minIdle: 0,
      maxConcurrent: 10,
      scaleUpStep: 5,
      drainGracePeriod: "1h",
      runnerSetupDelivery: "Environment",
    });

    const node = await imp.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "bare" } });
    assert.deepEqual(node.spec, { unschedulable: false });
  });

  test("pools with a cache volume at each end of its size range, and dotted cache paths, are accepted", async () => {
    for (const [i, size] of ["64Mi", "1048576Mi", "1024Gi", "1Ti"].entries()) {
      const pool = sample("impvmrunnerpool-org.yaml");
      pool.metadata.name = `cached-${i}`;
      (pool.spec as Record<string, unknown>)["cache"] = { size, paths: ["/var/lib/docker", "/home/runner/.cache", "/opt/.tool-cache/v1.2"] };
      const created = await imp.create(pool).catch((err: unknown) => Promise.reject(new Error(`cache size ${size} was rejected: ${err instanceof ApiException ? String(err.body) : String(err)}`)));
      assert.deepEqual((created.spec as { cache?: unknown }).cache, { size, paths: ["/var/lib/docker", "/home/runner/.cache", "/opt/.tool-cache/v1.2"] });
    }
  });

  test("a VM status walking every phase to Succeeded is accepted", async () => {
    const vm = await imp.create({ ...sample("impvm-hello.yaml"), metadata: { name: "walker" } });
    const status: Record<string, unknown> = { phaseTimestamps: {} };
    const stamp = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    let current = vm;
    for (const phase of ["Pending", "Scheduled", "Preparing", "Booting", "Running", "Succeeded"]) {
      Object.assign(status, { phase }, phase === "Scheduled" ? { nodeName: "worker-1" } : {}, phase === "Succeeded" ? { exitCode: 0 } : {});
      (status["phaseTimestamps"] as Record<string, string>)[phase.toLowerCase()] = stamp;
      current = await imp.replaceStatus({ ...current, status: clone(status) });
    }
    assert.equal((current.status as { phase: string }).phase, "Succeeded");
  });
});

describe("kubectl", () => {
  const kubectl = async (...args: string[]): Promise<string> =>
    (await execFileAsync(cp.binaries.kubectl, ["--kubeconfig", cp.kubeconfigPath, "-n", NAMESPACE, ...args], { timeout: 30_000 })).stdout;

  test("kubectl finds ImpVMs by short name, category and status field selector, and prints phase, node and pool", async () => {
    const vm = await imp.create({ ...sample("impvm-hello.yaml"), metadata: { name: "shown", labels: { [LABELS.pool]: "linux-x64" } } });
    await imp.replaceStatus({ ...vm, status: { phase: "Scheduled", nodeName: "worker-7" } });

    const table = await kubectl("get", "ivm", "shown");
    const [header, row] = table.trim().split("\n").map((line) => line.trim().split(/\s+/));
    assert.deepEqual(header, ["NAME", "PHASE", "NODE", "POOL", "AGE"]);
    assert.deepEqual(row?.slice(0, 4), ["shown", "Scheduled", "worker-7", "linux-x64"]);

    const byCategory = await kubectl("get", "imp", "-o", "name");
    assert.ok(byCategory.includes("impvm.imp.dev/shown"), byCategory);
    assert.ok(byCategory.includes("impvmrunnerpool.imp.dev/linux-x64"), byCategory);

    const onNode = await kubectl("get", "ivm", "--field-selector", "status.nodeName=worker-7", "-o", "name");
    assert.equal(onNode.trim(), "impvm.imp.dev/shown");
  });
});

describe("invalid objects", () => {
  CREATE_CASES.forEach((c, i) => {
    test(`create is rejected naming ${c.field}: ${c.name}`, async (t) => {
      const obj = c.object();
      if (SAMPLE_NAMES.has(obj.metadata.name)) obj.metadata.name = `invalid-${i}`;
      const message = await rejection(imp.create(obj));
      t.diagnostic(message);
      assert.ok(message.includes(`${c.field}: `), `message names ${c.field}: ${message}`);
    });
  });

  UPDATE_CASES.forEach((c, i) => {
    test(`${c.subresource === "status" ? "status " : ""}update is rejected naming ${c.field}: ${c.name}`, async (t) => {
      let obj = await imp.create({ ...c.object(), metadata: { name: `update-${i}` } });
      if (c.initialStatus !== undefined) obj = await imp.replaceStatus({ ...obj, status: clone(c.initialStatus) });
      const changed = clone(obj);
      c.change(changed);
      const message = await rejection(c.subresource === "status" ? imp.replaceStatus(changed) : imp.replace(changed));
      t.diagnostic(message);
      assert.ok(message.includes(`${c.field}: `), `message names ${c.field}: ${message}`);
    });
  });
});

describe("sealed material in an ImpVM's status", () => {
  test("the sealed setup is written once with the setup, never changed, may be removed and never comes back; sealed inputs are set once", async () => {
    let vm = await imp.create({ ...sample("impvm-hello.yaml"), metadata: { name: "sealed-vm" } });
    const withStatus = (status: ImpVMStatus): typeof vm => ({ ...clone(vm), status });
    const sealedOnce: ImpVMStatus = { phase: "Scheduled", nodeName: "node-a", setup: { state: "Minted", sealed: '{"ct":"one"}' }, inputs: { sealed: '{"ct":"in"}' } };
    vm = await imp.replaceStatus(withStatus(sealedOnce));
    assert.match(await rejection(imp.replaceStatus(withStatus({ ...sealedOnce, setup: { state: "Minted", sealed: '{"ct":"two"}' } }))), /the sealed setup is written once/);
    assert.match(await rejection(imp.replaceStatus(withStatus({ ...sealedOnce, inputs: { sealed: '{"ct":"other"}' } }))), /the sealed inputs are set once/);
    const { inputs: _inputs, ...withoutInputs } = sealedOnce;
    vm = await imp.replaceStatus(withStatus({ ...withoutInputs, setup: { state: "Deleted" } }));
    const stored = vm.status as ImpVMStatus;
    assert.equal(stored.setup?.sealed, undefined);
    assert.equal(stored.inputs, undefined);
    assert.match(await rejection(imp.replaceStatus(withStatus({ ...withoutInputs, setup: { state: "Deleted", sealed: '{"ct":"one"}' } }))), /the sealed setup is written once/);
    await imp.delete(vm);
  });
});

/** Names used by the samples (created above), so a case that kept a sample's name gets a unique one. */
const SAMPLE_NAMES = new Set([...loadSamples().values()].map((s) => s.metadata.name));
