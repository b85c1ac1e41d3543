/**
 * The one-time runner setup path on a real API server (with garbage collection) against the GitHub
 * test server: crash between mint and store (a restarted operator, and a runner minted behind the
 * operator's back), a node that has not published its key yet, an installation token GitHub stops
 * accepting mid-run, a storm of 429s, a VM deleted while registered, and an enterprise pool (a token, not an App). The invariant checked
 * throughout (I1): no runner name is ever registered twice, and each VM ends with at most one.
 */
import assert from "node:assert/strict";
import { after, before, describe, it, type TestContext } from "node:test";
import { Registry } from "prom-client";
import { API_VERSION, GITHUB_APP_SECRET_KEYS, type ImpVMClass, type ImpVMTemplate, LABELS, SETUP_SEAL_SUITE, generateNodeKeyPair, openSetup, parseSealedSetup, type ImpNode, type ImpVM, type ImpVMRunnerPool, type NodeKeyPair, IMP_VM_CLASSES, IMP_VM_TEMPLATES, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, isNotFound, LEASE_RESOURCE, microTime, type KubeObject, type Lease, type ResourceClient, installCrds } from "../../../src/kube/index.ts";
import { agentLeaseName, DEFAULT_AGENT_LEASE_NAMESPACE, IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, Operator, SECRETS, type OperatorOptions, type SecretObject } from "../../../src/operator/index.ts";
import { createLogger, FaultPoints, parseFaultPlan, waitFor } from "../../../src/shared/index.ts";
import { APP_ID, INSTALLATION_ID, startGitHub, type GitHubFixture } from "../../github/harness.ts";
import { decodeJitSetup } from "../../github/jit-setup-format.ts";

const CRASH_NS = "crash";
const REPO = { owner: "acme", repo: "api" };
const WAIT = { timeoutMs: 120_000, intervalMs: 100 };
const NAMESPACES = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false } as const;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe("operator: one-time runner setup", { timeout: 900_000 }, () => {
  let plane: ControlPlane;
  let vms: ResourceClient<ImpVM>;
  let pools: ResourceClient<ImpVMRunnerPool>;
  let nodes: ResourceClient<ImpNode>;
  let secrets: ResourceClient<SecretObject>;
  let keyA: NodeKeyPair;
  const stops: AbortController[] = [];
  const runs: Array<Promise<void>> = [];

  before(async () => {
    plane = await startControlPlane({ controllerManager: true });
    await installCrds(plane.kubeConfig, buildAllCrds());
    vms = createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS);
    pools = createResourceClient<ImpVMRunnerPool>(plane.kubeConfig, IMP_VM_RUNNER_POOLS);
    nodes = createResourceClient<ImpNode>(plane.kubeConfig, IMP_NODES);
    secrets = createResourceClient<SecretObject>(plane.kubeConfig, SECRETS);
    await createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES).create({ apiVersion: "v1", kind: "Namespace", metadata: { name: CRASH_NS } });
    keyA = await generateNodeKeyPair();
    await publishNode("node-a", keyA);
  });

  after(async () => {
    for (const s of stops) s.abort();
    await Promise.all(runs.map((r) => r.catch(() => undefined)));
    await plane?.stop();
  });

  async function publishNode(name: string, key: NodeKeyPair | undefined): Promise<void> {
    await nodes.get({ name }).catch(async (err: unknown) => {
      if (!isNotFound(err)) throw err;
      await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name }, spec: { unschedulable: false } });
    });
    if (key !== undefined) await nodes.patchStatus({ name }, { status: { setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: key.keyId, publicKey: key.publicKey } } });
  }

  /** Starts an operator; returns its stop switch. Each test that needs one gets its own namespace or pool. */
  function startOperator(options: Partial<OperatorOptions> = {}): { stop: AbortController; done: Promise<void>; registry: Registry } {
    const stop = new AbortController();
    const registry = new Registry();
    const operator = new Operator({
      kubeConfig: plane.kubeConfig,
      logger: createLogger({ level: process.env["IMP_TEST_LOG"] ?? "error", name: "operator" }),
      leaderElection: false,
      // The tests play scheduler (they bind VMs themselves) unless a test turns these on.
      scheduler: false,
      nodeLoss: false,
      runnerListIntervalMs: 1_000,
      githubClientOptions: { serverErrorBackoffMs: 50 },
      registry,
      ...options,
    });
    const done = operator.start(stop.signal);
    done.catch(() => undefined);
    stops.push(stop);
    runs.push(done);
    return { stop, done, registry };
  }

  /** A namespace of its own and an operator watching only it, stopped when the test ends. */
  async function isolated(t: TestContext, namespace: string, options: Partial<OperatorOptions> = {}): Promise<{ registry: Registry }> {
    await createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES).create({ apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } });
    const op = startOperator({ namespace, ...options });
    t.after(async () => {
      op.stop.abort();
      await op.done.catch(() => undefined);
    });
    return { registry: op.registry };
  }

  async function createPool(namespace: string, name: string, gh: GitHubFixture, minIdle: number): Promise<void> {
    const b64 = (s: string): string => Buffer.from(s).toString("base64");
    await secrets.create({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: `${name}-app`, namespace },
      data: { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(gh.privateKey) },
    });
    await pools.create({
      apiVersion: API_VERSION,
      kind: "ImpVMRunnerPool",
      metadata: { name, namespace },
      spec: {
        templateName: "runner",
        github: { credentialsSecretRef: { name: `${name}-app` }, apiURL: gh.server.url, scope: "repo", repository: `${REPO.owner}/${REPO.repo}`, runnerGroup: "Default", labels: ["imp"] },
        minIdle,
        maxConcurrent: Math.max(minIdle, 1),
        scaleUpStep: 5,
        runnerCommand: ["/runner/run.sh"],
      },
    });
  }

  async function waitForVms(namespace: string, pool: string, count: number): Promise<ImpVM[]> {
    return waitFor(`${count} VMs of pool ${pool}`, async () => {
      const list = (await vms.list({ namespace, labelSelector: `${LABELS.pool}=${pool}` })).items.filter((vm) => vm.metadata.deletionTimestamp === undefined);
      return list.length === count ? list : undefined;
    }, WAIT);
  }

  const bind = (vm: ImpVM, node = "node-a"): Promise<ImpVM> =>
    vms.patchStatus({ namespace: vm.metadata.namespace, name: vm.metadata.name ?? "" }, { status: { phase: "Scheduled", nodeName: node, phaseTimestamps: { scheduled: new Date().toISOString() } } });

  async function waitForMinted(vm: ImpVM): Promise<ImpVM> {
    return waitFor(`setup of ${vm.metadata.name} minted`, async () => {
      const now = await vms.get({ namespace: vm.metadata.namespace, name: vm.metadata.name ?? "" });
      return now.status?.setup?.state === "Minted" && now.status.runner !== undefined ? now : undefined;
    }, WAIT);
  }

  /** The VM's sealed setup opens with `key` and is the jitconfig of the one runner GitHub holds under its name. */
  async function assertOneRunner(gh: GitHubFixture, vm: ImpVM, key: NodeKeyPair): Promise<void> {
    const name = vm.metadata.name ?? "";
    const named = [...gh.server.runners.values()].filter((r) => r.name === name);
    assert.equal(named.length, 1, `exactly one runner ${name} is registered`);
    assert.equal(vm.status?.runner?.id, named[0]?.id, "status.runner is the registered one");
    const sealed = parseSealedSetup(vm.status?.setup?.sealed ?? "");
    const setup = decodeJitSetup(Buffer.from(await openSetup(sealed, key, vm.metadata.uid ?? "")).toString("utf8"));
    assert.equal(setup.runner.AgentId, named[0]?.id);
    assert.equal(setup.credentials.Data.secret, named[0]?.secret);
  }

  function assertNamesUnique(gh: GitHubFixture): void {
    const names = [...gh.server.runners.values()].map((r) => r.name);
    assert.deepEqual(names, [...new Set(names)], "no runner name is registered twice");
  }

  it("an operator killed between minting and storing: the restarted one leaves exactly one runner", async (t) => {
    const gh = await startGitHub(t);
    let mintedBeforeCrash = 0;
    const first = startOperator({
      namespace: CRASH_NS,
      // The process "dies" right after GitHub minted: it stops, and this reconcile never continues
      // (in-process, a hang stands in for the SIGKILL that `crash` would send to the whole test).
      faults: new FaultPoints([{ point: "setup.after-mint", action: { kind: "hang" } }], () => {
        mintedBeforeCrash++;
        first.stop.abort(new Error("SIGKILL stand-in"));
      }),
    });
    await createPool(CRASH_NS, "crashpool", gh, 1);
    const [vm] = await waitForVms(CRASH_NS, "crashpool", 1);
    assert.ok(vm !== undefined);
    await bind(vm);
    await first.done;
    assert.equal(mintedBeforeCrash, 1);
    const stale = gh.server.runnerNamed(vm.metadata.name ?? "");
    assert.ok(stale !== undefined, "GitHub holds the runner minted before the crash");
    assert.equal((await vms.get({ namespace: CRASH_NS, name: vm.metadata.name ?? "" })).status?.setup, undefined, "and nothing recorded it");

    startOperator({ namespace: CRASH_NS });
    const minted = await waitForMinted(vm);
    await assertOneRunner(gh, minted, keyA);
    assert.notEqual(minted.status?.runner?.id, stale.id, "the stale registration was replaced, not reused (its setup was lost with the crash)");
    assert.equal(gh.server.runners.has(stale.id), false);
    assert.deepEqual(gh.server.requestsTo(/generate-jitconfig$/).map((r) => r.status), [201, 409, 201], "mint, name taken, mint once more");
    assertNamesUnique(gh);
  });

  it("a fault after the setup is recorded and before the reconcile ends (setup.after-record=fail@1): the retry reads the record from the API, never mints again", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-afterrecord";
    const fired: string[] = [];
    const faults = new FaultPoints(parseFaultPlan("setup.after-record=fail@1"), (point, action) => fired.push(`${point}=${action.kind}`));
    await isolated(t, ns, { faults });
    await createPool(ns, "afterrecord", gh, 1);
    const [vm] = await waitForVms(ns, "afterrecord", 1);
    assert.ok(vm !== undefined);
    await bind(vm);
    const minted = await waitForMinted(vm);
    await assertOneRunner(gh, minted, keyA);
    await waitFor("the fault acted once", async () => (fired.length === 1 ? true : undefined), WAIT);
    assert.deepEqual(fired, ["setup.after-record=fail"]);
    assert.equal(faults.hits("setup.after-mint"), 1, "minted once");
    assert.deepEqual(gh.server.requestsTo(/generate-jitconfig$/).map((r) => r.status), [201], "one mint, no second");
    assertNamesUnique(gh);
  });

  it("a runner minted behind the operator's back under a VM's name is removed before the VM's own is minted", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-behind";
    await isolated(t, ns);
    await createPool(ns, "behind", gh, 1);
    const [vm] = await waitForVms(ns, "behind", 1);
    assert.ok(vm !== undefined);
    const early = await gh.client().generateJitConfig({ kind: "repo", ...REPO }, { name: vm.metadata.name ?? "", runnerGroupId: 1, labels: ["imp"] });
    await bind(vm);
    const minted = await waitForMinted(vm);
    await assertOneRunner(gh, minted, keyA);
    assert.notEqual(minted.status?.runner?.id, early.runnerId);
    assertNamesUnique(gh);
  });

  it("waits for the bound node's key; seals to that node only", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-waitkey";
    const { registry } = await isolated(t, ns);
    await publishNode("node-b", undefined);
    await createPool(ns, "waitkey", gh, 1);
    const [vm] = await waitForVms(ns, "waitkey", 1);
    assert.ok(vm !== undefined);
    // The setup controller's waits for a key end in requeue_after; two more of them after the bind
    // mean it saw the bound VM, found no key and decided to wait, at least once.
    const waits = async (): Promise<number> => (await registry.getSingleMetric("imp_controller_reconcile_total")?.get())?.values.find((v) => v.labels["controller"] === "imp-runner-setup" && v.labels["result"] === "requeue_after")?.value ?? 0;
    const before = await waits();
    await bind(vm, "node-b");
    await waitFor("the setup controller waited for node-b's key twice", async () => ((await waits()) >= before + 2 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100 });
    const waiting = await vms.get({ namespace: ns, name: vm.metadata.name ?? "" });
    assert.equal(waiting.status?.setup, undefined, "no setup while the node has no key");
    assert.equal(gh.server.runnerNamed(vm.metadata.name ?? ""), undefined, "and nothing registered for it");
    const keyB = await generateNodeKeyPair();
    await publishNode("node-b", keyB);
    const minted = await waitForMinted(vm);
    await assertOneRunner(gh, minted, keyB);
    const sealed = parseSealedSetup(minted.status?.setup?.sealed ?? "");
    await assert.rejects(openSetup(sealed, keyA, vm.metadata.uid ?? ""), /sealed to key/);
  });

  it("an installation token GitHub stops accepting mid-run is replaced without failing anything", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-token";
    await isolated(t, ns);
    await createPool(ns, "token", gh, 2);
    const [one, two] = await waitForVms(ns, "token", 2);
    assert.ok(one !== undefined && two !== undefined);
    await bind(one);
    await waitForMinted(one);
    const tokensBefore = gh.server.requestsTo(/access_tokens$/).length;
    gh.server.expireTokens();
    await sleep(5_100); // past auth-app's 5 s window in which a 401 is taken for replication delay
    await bind(two);
    const minted = await waitForMinted(two);
    await assertOneRunner(gh, minted, keyA);
    assert.ok(gh.server.requestsTo(/access_tokens$/).length > tokensBefore, "a fresh token was minted");
    assert.ok(gh.server.requests.some((r) => r.status === 401), "GitHub refused the expired token at least once");
    const pool = await pools.get({ namespace: ns, name: "token" });
    assert.equal(pool.status?.conditions?.find((c) => c.type === "CredentialsValid")?.status, "True");
    assertNamesUnique(gh);
  });

  it("a storm of 429s slows registration down and loses nothing", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-storm";
    await isolated(t, ns);
    await createPool(ns, "storm", gh, 3);
    const three = await waitForVms(ns, "storm", 3);
    gh.server.injectFault({ kind: "secondary-rate-limit", status: 429, retryAfterSeconds: 1, count: 8, path: /generate-jitconfig$/ });
    gh.server.injectFault({ kind: "rate-limit", status: 429, resetInSeconds: 1, count: 4, path: /\/actions\/runners$/ });
    const started = Date.now();
    for (const vm of three) await bind(vm);
    const minted = await Promise.all(three.map((vm) => waitForMinted(vm)));
    const jit = gh.server.requestsTo(/generate-jitconfig$/).map((r) => `${r.status}@${r.at - started}ms`);
    t.diagnostic(`3 setups minted ${Date.now() - started} ms after binding, through ${jit.length} generate-jitconfig requests: ${jit.join(" ")}`);
    for (const vm of minted) await assertOneRunner(gh, vm, keyA);
    assert.equal(gh.server.runners.size, 3);
    const limited = gh.server.requests.filter((r) => r.status === 429).length;
    assert.ok(limited >= 8, `the storm was met (${limited} answers 429)`);
    assert.equal(gh.server.faultsLeft <= 4, true, "every jitconfig fault was consumed by a request");
    assertNamesUnique(gh);
  });

  it("an enterprise pool registers with the token from its Secret; App keys alone are refused before anything is sent", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-enterprise";
    await isolated(t, ns);
    const b64 = (s: string): string => Buffer.from(s).toString("base64");
    const TOKEN = "ghp_imp_enterprise_runners";
    gh.server.acceptPersonalToken(TOKEN);
    const enterprisePool = async (name: string, data: Record<string, string>): Promise<void> => {
      await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: `${name}-creds`, namespace: ns }, data });
      await pools.create({
        apiVersion: API_VERSION,
        kind: "ImpVMRunnerPool",
        metadata: { name, namespace: ns },
        spec: {
          templateName: "runner",
          github: { credentialsSecretRef: { name: `${name}-creds` }, apiURL: gh.server.url, scope: "enterprise", enterprise: "acme-corp", runnerGroup: "Default", labels: ["imp"] },
          minIdle: 1,
          maxConcurrent: 1,
          scaleUpStep: 1,
          runnerCommand: ["/runner/run.sh"],
        },
      });
    };
    // App keys only: GitHub's enterprise runner endpoints refuse installation tokens, so the
    // operator refuses the Secret itself instead of sending requests that cannot succeed.
    await enterprisePool("entapp", { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(gh.privateKey) });
    const refused = await waitFor("pool entapp reports its credentials invalid", async () => {
      const pool = await pools.get({ namespace: ns, name: "entapp" });
      const c = pool.status?.conditions?.find((x) => x.type === "CredentialsValid");
      return c?.status === "False" ? c : undefined;
    }, WAIT);
    assert.match(refused.message ?? "", /CredentialsSecretInvalid|manage_runners:enterprise/);
    assert.match(refused.message ?? "", /token/);
    const [appVm] = await waitForVms(ns, "entapp", 1);
    assert.ok(appVm !== undefined);
    await bind(appVm);

    await enterprisePool("enttoken", { token: b64(`${TOKEN}\n`) });
    const [vm] = await waitForVms(ns, "enttoken", 1);
    assert.ok(vm !== undefined);
    await bind(vm);
    const minted = await waitForMinted(vm);
    await assertOneRunner(gh, minted, keyA);
    assert.equal(gh.server.runnerNamed(vm.metadata.name ?? "")?.scopeKey, "enterprise:acme-corp");
    const pool = await waitFor("pool enttoken lists its runners", async () => {
      const p = await pools.get({ namespace: ns, name: "enttoken" });
      return p.status?.conditions?.find((c) => c.type === "CredentialsValid")?.status === "True" ? p : undefined;
    }, WAIT);
    assert.ok(pool.status !== undefined);
    const appVmNow = await vms.get({ namespace: ns, name: appVm.metadata.name ?? "" });
    assert.equal(appVmNow.status?.setup, undefined, "the App-keys pool's bound VM got no setup");
    assert.equal(gh.server.runnerNamed(appVm.metadata.name ?? ""), undefined, "and nothing was registered for it");
    assert.equal(gh.server.requestsTo(/access_tokens$/).length, 0, "no installation token was ever asked for");
    assert.ok(gh.server.requestsTo(/^\/enterprises\/acme-corp\/actions\/runners\/generate-jitconfig$/, "POST").every((r) => r.status === 201));
    assertNamesUnique(gh);
  });

  it("a registered VM that is deleted has its runner removed before it goes", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-delvm";
    await isolated(t, ns);
    await createPool(ns, "delvm", gh, 1);
    const [vm] = await waitForVms(ns, "delvm", 1);
    assert.ok(vm !== undefined);
    await bind(vm);
    const minted = await waitForMinted(vm);
    const name = vm.metadata.name ?? "";
    await vms.delete({ namespace: ns, name });
    await waitFor(`ImpVM ${name} gone`, async () => (await vms.get({ namespace: ns, name }).then(() => undefined, (err: unknown) => (isNotFound(err) ? true : Promise.reject(err)))), WAIT);
    assert.equal(gh.server.runners.has(minted.status?.runner?.id ?? 0), false, "its registration went first");
    assertNamesUnique(gh);
  });

  it("a fault before a deleted VM's registration is removed (teardown.before-deregister=fail@1): the retry removes it, then the VM goes", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-deregfault";
    const fired: string[] = [];
    const faults = new FaultPoints(parseFaultPlan("teardown.before-deregister=fail@1"), (point, action) => fired.push(`${point}=${action.kind}`));
    await isolated(t, ns, { faults });
    await createPool(ns, "deregfault", gh, 1);
    const [vm] = await waitForVms(ns, "deregfault", 1);
    assert.ok(vm !== undefined);
    await bind(vm);
    const minted = await waitForMinted(vm);
    const name = vm.metadata.name ?? "";
    await vms.delete({ namespace: ns, name });
    await waitFor(`ImpVM ${name} gone`, async () => (await vms.get({ namespace: ns, name }).then(() => undefined, (err: unknown) => (isNotFound(err) ? true : Promise.reject(err)))), WAIT);
    assert.deepEqual(fired, ["teardown.before-deregister=fail"], "the first removal attempt failed at the point");
    assert.ok(faults.hits("teardown.before-deregister") >= 2, "and was retried");
    assert.equal(gh.server.runners.has(minted.status?.runner?.id ?? 0), false, "its registration went before the VM");
    assertNamesUnique(gh);
  });

  it("the whole operator, scheduler and node loss included, binds a pool VM to a live node and seals its setup and the Secret values it reads there", async (t) => {
    const gh = await startGitHub(t);
    const ns = "t-full";
    const kc = plane.kubeConfig;
    await createResourceClient<KubeObject>(kc, NAMESPACES).create({ apiVersion: "v1", kind: "Namespace", metadata: { name: DEFAULT_AGENT_LEASE_NAMESPACE } });
    await createResourceClient<ImpVMClass>(kc, IMP_VM_CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "1Gi", arch: "amd64" } });
    const keyF = await generateNodeKeyPair();
    // A simulated agent: ImpNode with capacity and key, and a fresh liveness Lease.
    await publishNode("node-full", keyF);
    await nodes.patchStatus({ name: "node-full" }, { status: { arch: "amd64", kernels: ["default"], capacity: { vcpu: 4, memoryMiB: 4096, vmSlots: 4 }, allocated: { vcpu: 0, memoryMiB: 0, vmSlots: 0 } } });
    await createResourceClient<Lease>(kc, LEASE_RESOURCE).create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: agentLeaseName("node-full"), namespace: DEFAULT_AGENT_LEASE_NAMESPACE }, spec: { holderIdentity: "node-full", leaseDurationSeconds: 40, renewTime: microTime(Date.now()) } });
    await isolated(t, ns, { scheduler: true, nodeLoss: true });
    await createResourceClient<ImpVMTemplate>(kc, IMP_VM_TEMPLATES).create({
      apiVersion: API_VERSION,
      kind: "ImpVMTemplate",
      metadata: { name: "runner", namespace: ns },
      spec: {
        classRef: { name: "small" },
        image: "registry.test/runner:1",
        kernel: "default",
        expireAfter: "1h",
        imagePullSecretRef: { name: "pull" },
        workload: { command: ["/bin/true"], env: [{ name: "TOKEN", valueFrom: { secretKeyRef: { name: "creds", key: "token" } } }] },
      },
    });
    const dockerConfig = JSON.stringify({ auths: { "registry.test": { auth: Buffer.from("u:p").toString("base64") } } });
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "creds", namespace: ns }, stringData: { token: "t0k3n", unread: "not for the VM" } } as SecretObject);
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "pull", namespace: ns }, type: "kubernetes.io/dockerconfigjson", stringData: { ".dockerconfigjson": dockerConfig } } as SecretObject);
    await createPool(ns, "full", gh, 1);
    const [vm] = await waitForVms(ns, "full", 1);
    assert.ok(vm !== undefined);
    const minted = await waitForMinted(vm);
    assert.equal(minted.status?.nodeName, "node-full", "the operator's own scheduler bound it");
    await assertOneRunner(gh, minted, keyF);
    // The pool's template reads two Secrets; the node's agent cannot: the operator sealed exactly the keys it reads to node-full.
    const withInputs = await waitFor("the VM's Secret inputs sealed to its node", async () => {
      const now = await vms.get({ namespace: ns, name: vm.metadata.name ?? "" });
      return now.status?.inputs !== undefined ? now : undefined;
    }, WAIT);
    const raw = withInputs.status?.inputs?.sealed ?? "";
    assert.ok(!raw.includes("t0k3n"), "the status holds only ciphertext");
    const opened = JSON.parse(Buffer.from(await openSetup(parseSealedSetup(raw, "inputs"), keyF, vm.metadata.uid ?? "", "inputs")).toString("utf8")) as unknown;
    // The pool gives its VMs their own workload (the runner), which replaces the template's: its env's Secret is not read, so not sealed.
    assert.deepEqual(opened, { v: 1, secrets: { pull: { ".dockerconfigjson": dockerConfig } } }, "exactly what the VM reads");
    await assert.rejects(openSetup(parseSealedSetup(raw, "inputs"), keyF, vm.metadata.uid ?? ""), /authentication failed/, "inputs never open as a setup");
  });
});
