/**
 * The operator's runner pools on a real API server (with kube-controller-manager, so owner
 * references are garbage-collected) against the GitHub test server (every request and response
 * checked against GitHub's OpenAPI description). The tests play scheduler and agent: they bind
 * VMs (status.phase Scheduled + nodeName) and publish an ImpNode with a real setup key.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, FINALIZERS, GITHUB_APP_SECRET_KEYS, LABELS, SETUP_SEAL_SUITE, generateNodeKeyPair, openSetup, parseSealedSetup, type ImpNode, type ImpVM, type ImpVMRunnerPool, type NodeKeyPair, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, isNotFound, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, Operator, SECRETS, WEBHOOK_PATH, type SecretObject } from "../../../src/operator/index.ts";
import { createLogger, waitFor } from "../../../src/shared/index.ts";
import { APP_ID, INSTALLATION_ID, startGitHub, type GitHubFixture } from "../../github/harness.ts";
import { decodeJitSetup } from "../../github/jit-setup-format.ts";

const NS = "default";
const REPO = { owner: "acme", repo: "web" };
const WEBHOOK_SECRET = "pool-test-webhook-secret";
const WAIT = { timeoutMs: 90_000, intervalMs: 100 };

describe("operator: runner pools", { timeout: 600_000 }, () => {
  let plane: ControlPlane;
  let operator: Operator;
  let registry: Registry;
  const stop = new AbortController();
  let running: Promise<void>;
  let vms: ResourceClient<ImpVM>;
  let pools: ResourceClient<ImpVMRunnerPool>;
  let nodes: ResourceClient<ImpNode>;
  let secrets: ResourceClient<SecretObject>;
  let nodeKey: NodeKeyPair;
  let otherKey: NodeKeyPair;
  let webhookUrl: string;

  before(async () => {
    plane = await startControlPlane({ controllerManager: true });
    await installCrds(plane.kubeConfig, buildAllCrds());
    vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
    pools = createResourceClient<ImpVMRunnerPool>(plane.kubeConfig, IMP_VM_RUNNER_POOLS);
    nodes = createResourceClient<ImpNode>(plane.kubeConfig, IMP_NODES);
    secrets = createResourceClient<SecretObject>(plane.kubeConfig, SECRETS);
    nodeKey = await generateNodeKeyPair();
    otherKey = await generateNodeKeyPair();
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-a" }, spec: { unschedulable: false } });
    await nodes.patchStatus({ name: "node-a" }, { status: { setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: nodeKey.keyId, publicKey: nodeKey.publicKey } } });
    registry = new Registry();
    operator = new Operator({
      kubeConfig: plane.kubeConfig,
      logger: createLogger({ level: process.env["IMP_TEST_LOG"] ?? "warn", name: "operator" }),
      identity: "pools-test",
      // The tests play scheduler and agent (they bind VMs and publish the ImpNode themselves).
      scheduler: false,
      nodeLoss: false,
      healthPort: 0,
      webhookPort: 0,
      webhookHost: "127.0.0.1",
      webhookSecrets: [WEBHOOK_SECRET],
      runnerListIntervalMs: 1_000,
      githubClientOptions: { serverErrorBackoffMs: 50 },
      registry,
    });
    running = operator.start(stop.signal);
    running.catch(() => undefined);
    webhookUrl = `${await operator.webhook!.listening()}${WEBHOOK_PATH}`;
  });

  after(async () => {
    stop.abort();
    await running?.catch(() => undefined);
    await plane?.stop();
  });

  async function credentials(name: string, gh: GitHubFixture): Promise<void> {
    const b64 = (s: string): string => Buffer.from(s).toString("base64");
    await secrets.create({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace: NS },
      data: { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(gh.privateKey) },
    });
  }

  async function createPool(name: string, gh: GitHubFixture, spec: Partial<ImpVMRunnerPool["spec"]> = {}): Promise<ImpVMRunnerPool> {
    await credentials(`${name}-app`, gh);
    return pools.create({
      apiVersion: API_VERSION,
      kind: "ImpVMRunnerPool",
      metadata: { name, namespace: NS },
      spec: {
        templateName: "runner",
        github: { credentialsSecretRef: { name: `${name}-app` }, apiURL: gh.server.url, scope: "repo", repository: `${REPO.owner}/${REPO.repo}`, runnerGroup: "Default", labels: ["imp", name] },
        minIdle: 2,
        maxConcurrent: 3,
        scaleUpStep: 5,
        runnerCommand: ["/runner/run.sh", "--ephemeral"],
        ...spec,
      },
    });
  }

  const liveVmsOf = async (pool: string): Promise<ImpVM[]> =>
    (await vms.list({ namespace: NS, labelSelector: `${LABELS.pool}=${pool}` })).items.filter((vm) => vm.metadata.deletionTimestamp === undefined && vm.status?.phase !== "Succeeded" && vm.status?.phase !== "Failed");

  async function waitForVms(pool: string, count: number): Promise<ImpVM[]> {
    return waitFor(`${count} live VMs of pool ${pool}`, async () => {
      const list = await liveVmsOf(pool);
      return list.length === count ? list : undefined;
    }, WAIT);
  }

  const bind = (vm: ImpVM, node = "node-a"): Promise<ImpVM> =>
    vms.patchStatus({ namespace: NS, name: vm.metadata.name ?? "" }, { status: { phase: "Scheduled", nodeName: node, phaseTimestamps: { scheduled: new Date().toISOString() } } });

  const run = (vm: ImpVM): Promise<ImpVM> => vms.patchStatus({ namespace: NS, name: vm.metadata.name ?? "" }, { status: { phase: "Running", phaseTimestamps: { running: new Date().toISOString() } } });

  async function waitForMinted(name: string): Promise<ImpVM> {
    return waitFor(`setup of ${name} minted`, async () => {
      const vm = await vms.get({ namespace: NS, name });
      return vm.status?.setup?.state === "Minted" && vm.status.runner !== undefined ? vm : undefined;
    }, WAIT);
  }

  const gone = async (read: () => Promise<unknown>): Promise<boolean> => {
    try {
      await read();
      return false;
    } catch (err) {
      if (isNotFound(err)) return true;
      throw err;
    }
  };

  /** Deletes a pool: its VMs go first, each deregistered, and only then the pool itself. */
  async function deletePool(name: string, gh: GitHubFixture): Promise<void> {
    await pools.delete({ namespace: NS, name });
    await waitFor(`pool ${name} gone`, async () => ((await gone(() => pools.get({ namespace: NS, name }))) ? true : undefined), WAIT);
    assert.deepEqual((await vms.list({ namespace: NS, labelSelector: `${LABELS.pool}=${name}` })).items.map((vm) => vm.metadata.name), [], "no VM outlives its pool");
    assert.deepEqual([...gh.server.runners.values()].map((r) => r.name), [], "no registration outlives its VM");
  }

  /**
   * Waits until the operator listed the pool's runners `rounds` more times. A pool's reconciles run
   * one at a time and each lists first, so once round n+2 has begun, a whole reconcile that began
   * after this call (observe, decide, act) has finished: what it did not do, it decided not to do.
   */
  async function reconciledAgain(gh: GitHubFixture, rounds = 3): Promise<void> {
    const lists = (): number => gh.server.requestsTo(/\/actions\/runners$/, "GET").length;
    const from = lists();
    await waitFor(`${rounds} more runner-list rounds of the operator`, async () => (lists() >= from + Math.max(2, rounds) ? true : undefined), WAIT);
  }

  /** Every runner name the GitHub test server holds is registered once (I1). */
  function assertNamesUnique(gh: GitHubFixture): void {
    const names = [...gh.server.runners.values()].map((r) => r.name);
    assert.deepEqual(names, [...new Set(names)], "no runner name is registered twice");
  }

  it("keeps minIdle VMs; bound VMs get a setup sealed to their node, a runner id, and nothing in clear", async (t) => {
    const gh = await startGitHub(t);
    const pool = await createPool("alpha", gh);
    const created = await waitForVms("alpha", 2);
    // Several runner-list rounds later there are still exactly two.
    await reconciledAgain(gh);
    assert.equal((await liveVmsOf("alpha")).length, 2, "minIdle 2: no more VMs than that");
    for (const vm of created) {
      assert.match(vm.metadata.name ?? "", /^alpha-[a-z0-9]{5}$/);
      assert.equal(vm.metadata.ownerReferences?.[0]?.uid, pool.metadata.uid);
      assert.ok(vm.metadata.finalizers?.includes(FINALIZERS.runnerRegistration));
      assert.deepEqual(vm.spec.templateRef, { name: "runner" });
      assert.deepEqual(vm.spec.workload?.command, ["/runner/run.sh", "--ephemeral"]);
      assert.equal(vm.status?.setup, undefined, "no setup before the VM is bound");
    }
    assert.equal(gh.server.runners.size, 0, "nothing is registered for unbound VMs");

    for (const vm of created) await bind(vm);
    for (const vm of created) {
      const name = vm.metadata.name ?? "";
      const minted = await waitForMinted(name);
      const runner = gh.server.runnerNamed(name);
      assert.ok(runner !== undefined, `GitHub has runner ${name}`);
      assert.equal(minted.status?.runner?.id, runner.id);
      assert.deepEqual(runner.labels.filter((l) => l.type === "custom").map((l) => l.name).sort(), ["alpha", "imp"]);
      const raw = minted.status?.setup?.sealed ?? "";
      await assert.rejects(secrets.get({ namespace: NS, name: `${name}-setup` }), (err) => isNotFound(err), "no Secret holds the setup: it is in the VM's status, sealed");
      const sealed = parseSealedSetup(raw);
      assert.equal(sealed.keyId, nodeKey.keyId);
      const plain = Buffer.from(await openSetup(sealed, nodeKey, vm.metadata.uid ?? "")).toString("utf8");
      const decoded = decodeJitSetup(plain);
      assert.equal(decoded.runner.AgentName, name);
      assert.equal(decoded.runner.AgentId, runner.id);
      assert.equal(decoded.credentials.Data.secret, runner.secret, "the sealed setup is the one GitHub issued for this runner");
      await assert.rejects(openSetup(sealed, otherKey, vm.metadata.uid ?? ""), /sealed to key/, "another node's key cannot open it");
      await assert.rejects(openSetup({ ...sealed }, nodeKey, "some-other-vm-uid"), /authentication failed/, "it does not open for another VM");
      assert.ok(!raw.includes(runner.secret) && !plain.includes("sealed"), "the Secret holds ciphertext only");
      assert.ok(!JSON.stringify(minted).includes(runner.secret), "the setup is not in the VM's status");
    }
    assertNamesUnique(gh);
    // The counts are written at most every 5 s (decideStatusWrite): wait for them.
    const status = await waitFor("alpha's status counts its 2 VMs", async () => {
      const s = (await pools.get({ namespace: NS, name: "alpha" })).status;
      return s?.current === 2 ? s : undefined;
    }, WAIT);
    assert.equal(status.desired, 2);
    assert.equal(status.conditions?.find((c) => c.type === "CredentialsValid")?.status, "True");
    await deletePool("alpha", gh);
  });

  it("a VM that ends has its registration removed, is deleted with its sealed setup, and a replacement created", async (t) => {
    const gh = await startGitHub(t);
    await createPool("beta", gh);
    const [first, second] = await waitForVms("beta", 2);
    assert.ok(first !== undefined && second !== undefined);
    await bind(first);
    await bind(second);
    const minted = await waitForMinted(first.metadata.name ?? "");
    await waitForMinted(second.metadata.name ?? "");
    const name = first.metadata.name ?? "";
    assert.ok(gh.server.runnerNamed(name) !== undefined);
    await run(first);
    await vms.patchStatus({ namespace: NS, name }, { status: { phase: "Succeeded", exitCode: 0, reason: "Completed", phaseTimestamps: { succeeded: new Date().toISOString() } } });
    await waitFor(`runner ${name} removed from GitHub`, async () => (gh.server.runnerNamed(name) === undefined ? true : undefined), WAIT);
    await waitFor(`ImpVM ${name} deleted`, async () => ((await gone(() => vms.get({ namespace: NS, name }))) ? true : undefined), WAIT);
    const now = await waitForVms("beta", 2);
    assert.ok(!now.some((vm) => vm.metadata.name === name), "a replacement took the ended VM's place");
    const deletes = gh.server.requestsTo(new RegExp(`/runners/${minted.status?.runner?.id}$`), "DELETE").map((r) => r.status);
    assert.equal(deletes[0], 204, "removed once");
    assert.ok(deletes.slice(1).every((s) => s === 404), "a repeat finds it gone (404 counts as done)");
    assertNamesUnique(gh);
    await deletePool("beta", gh);
  });

  it("scales down idle runners and unbound VMs only: a busy runner stays", async (t) => {
    const gh = await startGitHub(t);
    await createPool("gamma", gh);
    const both = await waitForVms("gamma", 2);
    for (const vm of both) await bind(vm);
    const [busyVm, idleVm] = await Promise.all(both.map((vm) => waitForMinted(vm.metadata.name ?? "")));
    assert.ok(busyVm !== undefined && idleVm !== undefined);
    for (const vm of [busyVm, idleVm]) {
      await run(vm);
      gh.server.setRunnerState(vm.status?.runner?.id ?? 0, { status: "online" });
    }
    gh.server.setRunnerState(busyVm.status?.runner?.id ?? 0, { busy: true });
    await waitFor("pool sees one busy, one idle", async () => {
      const s = (await pools.get({ namespace: NS, name: "gamma" })).status;
      return s?.busy === 1 && s.idle === 1 ? s : undefined;
    }, WAIT);
    // desired = busy 1 + minIdle 2 = 3: one more VM is created for the idle reserve (left unbound).
    await waitForVms("gamma", 3);
    await pools.patch({ namespace: NS, name: "gamma" }, { spec: { minIdle: 0 } });
    await waitFor(`idle VM ${idleVm.metadata.name} deleted`, async () => ((await gone(() => vms.get({ namespace: NS, name: idleVm.metadata.name ?? "" }))) ? true : undefined), WAIT);
    const left = await waitForVms("gamma", 1);
    assert.equal(left[0]?.metadata.name, busyVm.metadata.name, "the busy runner's VM stays; the idle and the unbound one went");
    assert.ok(gh.server.runnerNamed(busyVm.metadata.name ?? "") !== undefined, "its registration stays");
    assert.equal(gh.server.runnerNamed(idleVm.metadata.name ?? ""), undefined, "the idle runner was deregistered");
    await reconciledAgain(gh);
    assert.equal((await liveVmsOf("gamma")).length, 1, "busy 1 + minIdle 0: nothing is re-created");
    assertNamesUnique(gh);
    gh.server.setRunnerState(busyVm.status?.runner?.id ?? 0, { busy: false });
    await deletePool("gamma", gh);
  });

  it("VMs the scheduler finds no room for: ScalingLimited NodeCapacity and the waiting gauge, until they are placed", async (t) => {
    const gh = await startGitHub(t);
    await createPool("zeta", gh);
    const both = await waitForVms("zeta", 2);
    // Played here as the scheduler writes it when no node has room (bind-protocol.ts).
    const unschedulable = { type: "Scheduled", status: "False", reason: "Unschedulable", message: "no node fits: node-a full (vmSlots 0 free)", lastTransitionTime: new Date().toISOString() };
    for (const vm of both) await vms.patchStatus({ namespace: NS, name: vm.metadata.name ?? "" }, { status: { phase: "Pending", conditions: [unschedulable] } });
    // The first patched VM alone may already be reported (1 waiting): wait for both.
    const limited = await waitFor("zeta ScalingLimited NodeCapacity for both VMs", async () => {
      const c = (await pools.get({ namespace: NS, name: "zeta" })).status?.conditions?.find((x) => x.type === "ScalingLimited");
      return c?.reason === "NodeCapacity" && c.message.startsWith("2 ") ? c : undefined;
    }, WAIT);
    assert.equal(limited.status, "True");
    assert.match(limited.message, /^2 runner VM\(s\) wait for node capacity: no node has room/);
    const gauge = async (): Promise<number | undefined> => (await registry.getSingleMetric("imp_operator_pool_vms_waiting_for_capacity")?.get())?.values.find((v) => v.labels["pool"] === "zeta")?.value;
    assert.equal(await gauge(), 2);
    assert.equal((await liveVmsOf("zeta")).length, 2, "minIdle 2, and the two waiting VMs stand for it: none more");
    for (const vm of both) await bind(vm);
    await waitFor("zeta within limits once placed", async () => {
      const c = (await pools.get({ namespace: NS, name: "zeta" })).status?.conditions?.find((x) => x.type === "ScalingLimited");
      return c?.reason === "WithinLimits" ? c : undefined;
    }, WAIT);
    assert.equal(await gauge(), undefined, "no series once nothing waits");
    await deletePool("zeta", gh);
  });

  it("cordon drains a node: its idle runners are deregistered, deleted and replaced; its busy runner keeps its job; uncordon drains nothing more", async (t) => {
    const gh = await startGitHub(t);
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-d" }, spec: { unschedulable: false } });
    t.after(() => nodes.delete({ name: "node-d" }).catch(() => undefined));
    await nodes.patchStatus({ name: "node-d" }, { status: { setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: nodeKey.keyId, publicKey: nodeKey.publicKey } } });
    await createPool("drain", gh);
    const both = await waitForVms("drain", 2);
    for (const vm of both) await bind(vm, "node-d");
    const [busyVm, idleVm] = await Promise.all(both.map((vm) => waitForMinted(vm.metadata.name ?? "")));
    assert.ok(busyVm !== undefined && idleVm !== undefined);
    for (const vm of [busyVm, idleVm]) {
      await run(vm);
      gh.server.setRunnerState(vm.status?.runner?.id ?? 0, { status: "online" });
    }
    gh.server.setRunnerState(busyVm.status?.runner?.id ?? 0, { busy: true });
    // busy 1 + minIdle 2: a third VM for the reserve; bind and run it on node-d too.
    const third = (await waitForVms("drain", 3)).find((vm) => vm.status?.nodeName === undefined);
    assert.ok(third !== undefined);
    await bind(third, "node-d");
    await run(await waitForMinted(third.metadata.name ?? ""));
    gh.server.setRunnerState((await vms.get({ namespace: NS, name: third.metadata.name ?? "" })).status?.runner?.id ?? 0, { status: "online" });
    await waitFor("pool sees one busy, two idle", async () => {
      const st = (await pools.get({ namespace: NS, name: "drain" })).status;
      return st?.busy === 1 && st.idle === 2 ? st : undefined;
    }, WAIT);

    await nodes.patch({ name: "node-d" }, { spec: { unschedulable: true } });
    for (const name of [idleVm.metadata.name ?? "", third.metadata.name ?? ""]) {
      await waitFor(`idle VM ${name} drained`, async () => ((await gone(() => vms.get({ namespace: NS, name }))) ? true : undefined), WAIT);
      assert.equal(gh.server.runnerNamed(name), undefined, `${name} was deregistered`);
    }
    const now = await waitForVms("drain", 3);
    assert.ok(now.some((vm) => vm.metadata.name === busyVm.metadata.name), "the busy runner keeps its VM and its job");
    assert.equal(now.filter((vm) => vm.status?.nodeName === undefined).length, 2, "two replacements wait for a node that is not cordoned");
    assert.ok(gh.server.runnerNamed(busyVm.metadata.name ?? "") !== undefined, "and its registration");
    await nodes.patch({ name: "node-d" }, { spec: { unschedulable: false } });
    await reconciledAgain(gh);
    assert.deepEqual((await liveVmsOf("drain")).map((vm) => vm.metadata.name).sort(), now.map((vm) => vm.metadata.name).sort(), "uncordoned: nothing more is drained");
    assertNamesUnique(gh);
    gh.server.setRunnerState(busyVm.status?.runner?.id ?? 0, { busy: false });
    await deletePool("drain", gh);
  });

  it("webhooks: queued jobs burst the pool; forged, oversized and duplicate deliveries change nothing", async (t) => {
    const gh = await startGitHub(t);
    await createPool("delta", gh, { minIdle: 0, maxConcurrent: 2, webhook: { enabled: true, secretRef: { name: "unused", key: "secret" } } });
    await waitFor("pool delta reconciled", async () => ((await pools.get({ namespace: NS, name: "delta" })).status?.desired === 0 ? true : undefined), WAIT);
    const payload = JSON.stringify({ action: "queued", workflow_job: { id: 1, run_id: 2, name: "build", labels: ["self-hosted", "imp", "delta"] }, repository: { name: REPO.repo, full_name: `${REPO.owner}/${REPO.repo}`, owner: { login: REPO.owner } } });
    const post = (body: string, headers: Record<string, string>): Promise<number> =>
      fetch(webhookUrl, { method: "POST", headers: { "content-type": "application/json", "x-github-event": "workflow_job", "x-github-delivery": crypto.randomUUID(), ...headers }, body }).then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      });
    assert.equal(await post(payload, { "x-hub-signature-256": `sha256=${"0".repeat(64)}` }), 401, "forged signature");
    assert.equal(await post(payload, {}), 401, "no signature");
    assert.equal(await post("x".repeat(1024 * 1024 + 1), { "x-hub-signature-256": `sha256=${"0".repeat(64)}` }), 413, "oversized body");
    assert.equal((await fetch(webhookUrl.replace(WEBHOOK_PATH, "/other"), { method: "POST", body: payload })).status, 404);
    await reconciledAgain(gh);
    assert.equal((await liveVmsOf("delta")).length, 0, "no invalid delivery created a VM");

    // Real deliveries from the test server, signed with the App's secret; the first one twice.
    gh.server.webhooks.target = { url: webhookUrl, secret: WEBHOOK_SECRET };
    gh.server.webhooks.duplicateNext = 1;
    gh.server.queueJob({ repo: REPO, labels: ["self-hosted", "imp", "delta"], steps: [{ name: "build", run: "true" }] });
    await gh.server.webhooks.settled();
    await waitForVms("delta", 1);
    const sent = gh.server.webhooks.sent.map((s) => s.status);
    assert.deepEqual(sent, [202, 200], "the duplicate was acknowledged and ignored");
    await reconciledAgain(gh);
    assert.equal((await liveVmsOf("delta")).length, 1, "one queued job, one VM");
    // A job for labels the pool does not carry bursts nothing; two more of ours stop at maxConcurrent.
    gh.server.queueJob({ repo: REPO, labels: ["self-hosted", "gpu"], steps: [{ name: "x", run: "true" }] });
    gh.server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "x", run: "true" }] });
    gh.server.queueJob({ repo: REPO, labels: ["imp"], steps: [{ name: "x", run: "true" }] });
    await gh.server.webhooks.settled();
    await waitForVms("delta", 2);
    await reconciledAgain(gh);
    assert.equal((await liveVmsOf("delta")).length, 2, "maxConcurrent 2");
    const limited = (await pools.get({ namespace: NS, name: "delta" })).status?.conditions?.find((c) => c.type === "ScalingLimited");
    assert.equal(limited?.status, "True");
    assert.equal(limited?.reason, "MaxConcurrent");
    const metrics = await registry.getSingleMetric("imp_operator_webhooks_total")?.get();
    const count = (result: string): number => metrics?.values.find((v) => v.labels["result"] === result && v.labels["forge"] === "github")?.value ?? 0;
    assert.equal(count("rejected"), 2);
    assert.equal(count("too_large"), 1);
    assert.equal(count("duplicate"), 1);
    assert.equal(count("accepted"), 4);
    await deletePool("delta", gh);
  });
  it("scale-set mode: the pool creates its scale set, listens, creates a VM per assigned job, mints with the scale set's jitconfig, and deletes the scale set with the pool", async (t) => {
    const gh = await startGitHub(t, { actionsService: { queuePollMs: 500 } });
    await credentials("sigma-app", gh);
    await pools.create({
      apiVersion: API_VERSION,
      kind: "ImpVMRunnerPool",
      metadata: { name: "sigma", namespace: NS },
      spec: {
        templateName: "runner",
        github: { credentialsSecretRef: { name: "sigma-app" }, apiURL: gh.server.url, scope: "repo", repository: `${REPO.owner}/${REPO.repo}`, runnerGroup: "Default", labels: ["imp"], scaleSet: { name: "imp-sigma" } },
        minIdle: 0,
        maxConcurrent: 3,
        scaleUpStep: 5,
        runnerCommand: ["/runner/run.sh"],
      },
    });
    const listening = await waitFor("pool sigma listening", async () => {
      const st = (await pools.get({ namespace: NS, name: "sigma" })).status;
      const c = st?.conditions?.find((x) => x.type === "ScaleSetListening");
      return c?.status === "True" && st?.scaleSet?.sessionId !== undefined ? st : undefined;
    }, WAIT);
    const set = gh.server.actions.scaleSetNamed("imp-sigma");
    assert.ok(set !== undefined, "the operator created the scale set");
    assert.equal(listening.scaleSet?.id, set.id, "status.scaleSet records its id");
    assert.equal(listening.scaleSet?.sessionId, set.session?.id, "and the session the operator holds");
    assert.equal(listening.conditions?.find((c) => c.type === "Ready")?.status, "True");
    assert.deepEqual(set.labels.map((l) => l.name), ["imp-sigma", "imp"]);
    assert.equal((await liveVmsOf("sigma")).length, 0, "minIdle 0 and nothing assigned: no VM");

    const job = gh.server.queueJob({ repo: REPO, labels: ["imp-sigma"], steps: [{ name: "build", run: "true" }] });
    const [vm] = await waitForVms("sigma", 1);
    assert.ok(vm !== undefined);
    assert.equal(job.scaleSetId, set.id, "the listener acquired the job");
    await waitFor("status counts the assigned job", async () => {
      const st = (await pools.get({ namespace: NS, name: "sigma" })).status;
      return st?.scaleSet?.assignedJobs === 1 && st.queuedJobs === 1 ? st : undefined;
    }, WAIT);

    await bind(vm);
    const minted = await waitForMinted(vm.metadata.name ?? "");
    const runner = gh.server.runnerNamed(vm.metadata.name ?? "");
    assert.equal(runner?.scaleSetId, set.id, "minted with the scale set's generatejitconfig: its runner takes only the scale set's jobs");
    assert.equal(minted.status?.runner?.id, runner?.id);
    await run(vm);

    // The VM's runner comes online with the sealed setup and runs the job.
    const sealed = parseSealedSetup(minted.status?.setup?.sealed ?? "");
    const setup = decodeJitSetup(Buffer.from(await openSetup(sealed, nodeKey, vm.metadata.uid ?? "")).toString("utf8"));
    const post = async (path: string, body?: unknown): Promise<{ status: number; body: unknown }> => {
      const r = await fetch(`${gh.server.url}/_imp-test/runner${path}`, { method: "POST", headers: { "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      const text = await r.text();
      return { status: r.status, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
    };
    const opened = await post("/sessions", { runnerId: setup.runner.AgentId, runnerName: setup.runner.AgentName, secret: setup.credentials.Data.secret });
    const sessionId = (opened.body as { sessionId: string }).sessionId;
    assert.equal((await post(`/sessions/${sessionId}/acquire?waitSeconds=5`)).status, 200);
    await waitFor("JobStarted marks the runner busy", async () => ((await pools.get({ namespace: NS, name: "sigma" })).status?.busy === 1 ? true : undefined), WAIT);
    assert.equal((await post(`/sessions/${sessionId}/jobs/${job.id}/result`, { conclusion: "success", steps: [], log: "" })).status, 204);
    await waitFor("the job counted as started and completed, with its queue time", async () => {
      const text = await registry.metrics();
      return /gha_completed_jobs_total\{[^}]*actions_github_com_scale_set_name="sigma"[^}]*job_result="succeeded"[^}]*\} 1/.test(text) ? text : undefined;
    }, WAIT).then((text) => {
      assert.match(text, /gha_started_jobs_total\{[^}]*event_name="push"[^}]*actions_github_com_scale_set_name="sigma"[^}]*\} 1/, "the scale-set message's event name reaches ARC's label");
      assert.match(text, /gha_job_queue_duration_seconds_count\{[^}]*actions_github_com_scale_set_name="sigma"[^}]*\} 1/);
    });
    await vms.patchStatus({ namespace: NS, name: vm.metadata.name ?? "" }, { status: { phase: "Succeeded", exitCode: 0, reason: "Completed", phaseTimestamps: { succeeded: new Date().toISOString() } } });
    await waitFor("nothing assigned, nothing live", async () => {
      const st = (await pools.get({ namespace: NS, name: "sigma" })).status;
      return st?.scaleSet?.assignedJobs === 0 && (await liveVmsOf("sigma")).length === 0 ? true : undefined;
    }, WAIT);
    assertNamesUnique(gh);
    await deletePool("sigma", gh);
    assert.equal(gh.server.actions.scaleSetNamed("imp-sigma"), undefined, "the scale set went with its pool");
  });
});
