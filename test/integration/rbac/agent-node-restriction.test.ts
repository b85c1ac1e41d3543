/**
 * deploy/rbac's admission policy (agent-node-restriction.yaml) on a real API server: an agent's
 * token bound to its Pod on node A may write node A's objects and is refused every write to node
 * B's — its ImpNode and status, its Lease, the ImpVMs bound there (metadata and status) — and may
 * not rebind its own VMs; a token bound to no Pod (so naming no node) is refused even its own
 * node's writes. RBAC alone allows all of these: this is what the kubelet's NodeRestriction gives
 * kubelets, for Imp's agents. And what a compromised node reads: no Secret anywhere (kube-system, a
 * GitHub App key, a Gitea token), and another node's sealed setup and inputs only as ciphertext
 * that its own key cannot open. And cache-restriction.yaml: only the operator gives a VM a cache
 * volume or writes its clone's promotion decision.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { API_VERSION, GITHUB_APP_SECRET_KEYS, generateNodeKeyPair, openSetup, parseSealedSetup, sealSetup, type ImpNode, type ImpVM, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, LEASE_RESOURCE, type Lease, installCrds } from "../../../src/kube/index.ts";
import { IMP_NODES, IMP_VMS, SECRETS, type SecretObject } from "../../../src/operator/index.ts";
import { ImpError } from "../../../src/shared/index.ts";
import { IMP_SYSTEM, installRbac } from "../../harness/rbac.ts";

const execFileAsync = promisify(execFile);
const NS = "ci";

describe("deploy/rbac's admission policy: an agent writes only its own node's objects, and reads no Secret", { timeout: 300_000 }, () => {
  let plane: ControlPlane;
  let dir: string;
  const path = (name: string): string => join(dir, `${name}.kubeconfig`);
  const as = (name: string): KubeConfig => {
    const kc = new KubeConfig();
    kc.loadFromFile(path(name));
    return kc;
  };

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    dir = await mkdtemp(join(tmpdir(), "imp-node-restriction-"));
    await installCrds(plane.kubeConfig, buildAllCrds());
    await installRbac(plane, { "imp-agent": path("unbound"), "imp-operator": path("operator") }, { "node-a": path("node-a"), "node-b": path("node-b") });
    await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, "create", "namespace", NS], { timeout: 60_000 });
  });
  after(async () => {
    await plane?.stop();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  /** Resolves to "allowed", or the reason the API server refused (the policy's message). */
  async function attempt(write: () => Promise<unknown>): Promise<string> {
    try {
      await write();
      return "allowed";
    } catch (err) {
      const text = err instanceof ImpError ? `${err.code}: ${err.message}` : String(err);
      // The CRD's own transition rule refuses a moved VM (422) before admission sees it.
      if (!/imp-agent-node-restriction|Forbidden|forbidden|nodeName is set once/.test(text)) throw err;
      return text;
    }
  }

  it("the token names the node of the Pod (or Node) it is bound to", async () => {
    const { stdout } = await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", path("node-a"), "auth", "whoami", "-o", "json"], { timeout: 60_000 });
    const info = JSON.parse(stdout) as { status: { userInfo: { username: string; extra?: Record<string, string[]> } } };
    assert.equal(info.status.userInfo.username, `system:serviceaccount:${IMP_SYSTEM}:imp-agent`);
    assert.deepEqual(info.status.userInfo.extra?.["authentication.kubernetes.io/node-name"], ["node-a"]);
    // An agent run as a host process (no Pod) gets its node's name from a token bound to the Node.
    const { stdout: token } = await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, "-n", IMP_SYSTEM, "create", "token", "imp-agent", "--bound-object-kind", "Node", "--bound-object-name", "node-b", "--duration", "1h"], { timeout: 60_000 });
    const { stdout: nodeBound } = await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", path("unbound"), "--token", token.trim(), "auth", "whoami", "-o", "json"], { timeout: 60_000 });
    const bound = JSON.parse(nodeBound) as { status: { userInfo: { extra?: Record<string, string[]> } } };
    assert.deepEqual(bound.status.userInfo.extra?.["authentication.kubernetes.io/node-name"], ["node-b"]);
  });

  it("agent B's own writes pass; agent A is refused each of them on node B's objects; nobody rebinds a VM; an unbound token is refused", async () => {
    const nodesB = createResourceClient<ImpNode>(as("node-b"), IMP_NODES);
    const nodesA = createResourceClient<ImpNode>(as("node-a"), IMP_NODES);
    const leasesB = createResourceClient<Lease>(as("node-b"), LEASE_RESOURCE);
    const leasesA = createResourceClient<Lease>(as("node-a"), LEASE_RESOURCE);
    const vmsA = createResourceClient<ImpVM>(as("node-a"), IMP_VMS);
    const vmsB = createResourceClient<ImpVM>(as("node-b"), IMP_VMS);
    const admin = { vms: createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS) };
    const now = new Date().toISOString();
    const lease = (node: string): Lease => ({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: `imp-agent-${node}`, namespace: IMP_SYSTEM }, spec: { holderIdentity: node, leaseDurationSeconds: 40, renewTime: now.replace("Z", "000Z") } }) as unknown as Lease;

    // Agent B's own: its ImpNode, its status, its Lease.
    assert.equal(await attempt(() => nodesB.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-b" }, spec: { unschedulable: false } } as ImpNode)), "allowed");
    assert.equal(await attempt(() => nodesB.patchStatus({ name: "node-b" }, { status: { kvm: false } })), "allowed");
    assert.equal(await attempt(() => leasesB.create(lease("node-b"))), "allowed");

    // A VM bound to node B (the operator binds it).
    const vm = await admin.vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "vm-b", namespace: NS }, spec: { templateRef: { name: "t" }, workload: { command: ["/bin/true"] } } } as unknown as ImpVM);
    await admin.vms.patchStatus({ namespace: NS, name: "vm-b" }, { status: { phase: "Scheduled", nodeName: "node-b" } });

    // Agent A against node B's objects: every write refused, with the policy's reason.
    const refusedToA: Record<string, string> = {
      "create ImpNode node-b": await attempt(() => nodesA.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-c" }, spec: { unschedulable: false } } as ImpNode)),
      "patch ImpNode node-b's status": await attempt(() => nodesA.patchStatus({ name: "node-b" }, { status: { kvm: true } })),
      "patch ImpNode node-b": await attempt(() => nodesA.patch({ name: "node-b" }, { metadata: { labels: { owned: "by-a" } } })),
      "update node B's Lease": await attempt(() => leasesA.patch({ namespace: IMP_SYSTEM, name: "imp-agent-node-b" }, { spec: { holderIdentity: "node-a" } } as never)),
      "create a Lease for node B": await attempt(() => leasesA.create({ ...lease("node-x"), metadata: { name: "imp-agent-node-x", namespace: IMP_SYSTEM } } as Lease)),
      "patch status of a VM on node B": await attempt(() => vmsA.patchStatus({ namespace: NS, name: "vm-b" }, { status: { phase: "Failed", reason: "NodeLost" } })),
      "patch a VM on node B (its finalizer)": await attempt(() => vmsA.patch({ namespace: NS, name: "vm-b" }, { metadata: { finalizers: ["imp.dev/teardown"] } })),
      "delete ImpNode node-b": await attempt(() => nodesA.delete({ name: "node-b" })),
      "delete node B's Lease": await attempt(() => leasesA.delete({ namespace: IMP_SYSTEM, name: "imp-agent-node-b" })),
    };
    for (const [what, outcome] of Object.entries(refusedToA)) assert.notEqual(outcome, "allowed", `agent A was allowed to ${what}`);
    assert.match(refusedToA["patch status of a VM on node B"] ?? "", /only ImpVMs bound to its node \(node-a\)/);
    // Agents may delete ImpNodes and Leases (an uninstall retires each node), so the policy, not RBAC, refuses these.
    assert.match(refusedToA["delete ImpNode node-b"] ?? "", /only its own ImpNode \(node-a\), not node-b/);
    assert.match(refusedToA["delete node B's Lease"] ?? "", /only its own Lease \(imp-agent-node-a\)/);

    // Agent B on its own VM: status and finalizer pass; rebinding it to node A does not.
    assert.equal(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { phase: "Preparing" } })), "allowed");
    assert.equal(await attempt(() => vmsB.patch({ namespace: NS, name: "vm-b" }, { metadata: { finalizers: ["imp.dev/teardown"] } })), "allowed");
    assert.notEqual(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { nodeName: "node-a" } })), "allowed", "an agent cannot move a VM to another node");
    // The cache decision is the operator's: a node (where a job may have escaped to) cannot promote
    // its own VM's clone, nor remove the decision; it writes only what it did.
    assert.match(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { cache: { promotion: { decision: "Promote", reason: "Trusted", jobCompletedAt: now } } } })), /only the Imp operator may write or remove a VM's cache decision/);
    await admin.vms.patchStatus({ namespace: NS, name: "vm-b" }, { status: { cache: { promotion: { decision: "Discard", reason: "UntrustedEvent" } } } });
    assert.equal(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { cache: { result: "Discarded" } } })), "allowed");
    assert.match(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { cache: { promotion: null } } } as never)), /only the Imp operator may write or remove a VM's cache decision/);
    // Retiring its node (an uninstall): its own Lease and ImpNode.
    assert.equal(await attempt(() => leasesB.delete({ namespace: IMP_SYSTEM, name: "imp-agent-node-b" })), "allowed");
    assert.equal(await attempt(() => nodesB.delete({ name: "node-b" })), "allowed");

    // A token bound to no Pod names no node: refused even what would be its own.
    const unbound = createResourceClient<ImpNode>(as("unbound"), IMP_NODES);
    const noNode = await attempt(() => unbound.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-z" }, spec: { unschedulable: false } } as ImpNode));
    assert.match(noNode, /names no node: run the agent as its DaemonSet's Pod/);
    assert.ok(vm.metadata.uid !== undefined);
  });

  it("only the operator gives a VM a cache volume or decides its clone's promotion; a tenant who may write ImpVMs may do neither", async () => {
    const kubectl = (args: string[], input?: string): Promise<string> => {
      const child = execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, ...args], { timeout: 60_000 });
      if (input !== undefined) child.child.stdin?.end(input);
      return child.then((r) => r.stdout);
    };
    // A tenant: a ServiceAccount of the namespace allowed by RBAC to create ImpVMs and write their status.
    await kubectl(["-n", NS, "create", "serviceaccount", "tenant"]);
    await kubectl(["-n", NS, "create", "role", "vm-writer", "--verb=create,get,patch,update", "--resource=impvms.imp.dev,impvms.imp.dev/status"]);
    await kubectl(["-n", NS, "create", "rolebinding", "vm-writer", "--role=vm-writer", `--serviceaccount=${NS}:tenant`]);
    const token = (await kubectl(["-n", NS, "create", "token", "tenant", "--duration", "1h"])).trim();
    const tenantConfig = as("unbound");
    tenantConfig.users = [{ name: "tenant", token }];
    tenantConfig.contexts = tenantConfig.contexts.map((c) => ({ ...c, user: "tenant" }));
    const tenant = createResourceClient<ImpVM>(tenantConfig, IMP_VMS);
    const operator = createResourceClient<ImpVM>(as("operator"), IMP_VMS);
    const cached = (name: string): ImpVM => ({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name, namespace: NS }, spec: { templateRef: { name: "t" }, workload: { command: ["/bin/true"] }, cache: { volume: "pool-uid-1", size: "1Gi", paths: ["/var/lib/docker"] } } }) as unknown as ImpVM;

    assert.match(await attempt(() => tenant.create(cached("tenant-cached"))), /only the Imp operator creates an ImpVM with spec.cache/);
    assert.equal(await attempt(() => tenant.create({ ...cached("tenant-plain"), spec: { templateRef: { name: "t" }, workload: { command: ["/bin/true"] } } } as unknown as ImpVM)), "allowed", "the tenant's RBAC works: a VM without a cache is created");
    assert.equal(await attempt(() => operator.create(cached("pool-vm"))), "allowed");
    const completed = new Date().toISOString();
    assert.match(await attempt(() => tenant.patchStatus({ namespace: NS, name: "pool-vm" }, { status: { cache: { promotion: { decision: "Promote", reason: "Trusted", jobCompletedAt: completed } } } })), /only the Imp operator may write or remove a VM's cache decision/);
    assert.equal(await attempt(() => operator.patchStatus({ namespace: NS, name: "pool-vm" }, { status: { cache: { promotion: { decision: "Promote", reason: "Trusted", jobCompletedAt: completed } } } })), "allowed");
    assert.match(await attempt(() => tenant.patchStatus({ namespace: NS, name: "pool-vm" }, { status: { cache: { promotion: null } } } as never)), /only the Imp operator may write or remove a VM's cache decision/);
  });

  it("a compromised node reads no Secret — kube-system's, the GitHub App key, a Gitea token — and another node's sealed setup and inputs do not open with its key", async () => {
    const adminSecrets = createResourceClient<SecretObject>(plane.kubeConfig, SECRETS);
    const secretsA = createResourceClient<SecretObject>(as("node-a"), SECRETS);
    const canary = "canary-7c1e";
    const plant = async (namespace: string, name: string, data: Record<string, string>): Promise<void> => {
      await adminSecrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name, namespace }, stringData: data } as SecretObject);
    };
    await plant("kube-system", "canary", { value: canary });
    await plant(NS, "github-app", { [GITHUB_APP_SECRET_KEYS.appId]: "1", [GITHUB_APP_SECRET_KEYS.installationId]: "2", [GITHUB_APP_SECRET_KEYS.privateKey]: `-----BEGIN RSA PRIVATE KEY-----\n${canary}\n-----END RSA PRIVATE KEY-----` });
    await plant(NS, "gitea-token", { token: canary });
    await plant(IMP_SYSTEM, "webhook-secret", { secret: canary });
    const reads: Record<string, string> = {
      "kube-system/canary": await attempt(() => secretsA.get({ namespace: "kube-system", name: "canary" })),
      [`${NS}/github-app`]: await attempt(() => secretsA.get({ namespace: NS, name: "github-app" })),
      [`${NS}/gitea-token`]: await attempt(() => secretsA.get({ namespace: NS, name: "gitea-token" })),
      [`${IMP_SYSTEM}/webhook-secret`]: await attempt(() => secretsA.get({ namespace: IMP_SYSTEM, name: "webhook-secret" })),
      [`list in ${NS}`]: await attempt(() => secretsA.list({ namespace: NS })),
    };
    for (const [what, outcome] of Object.entries(reads)) {
      assert.notEqual(outcome, "allowed", `agent A read Secret ${what}`);
      assert.match(outcome, /forbidden/i, `${what}: refused by RBAC`);
      assert.ok(!outcome.includes(canary), `${what}: the refusal names no value`);
    }

    // Node B's VM holds its setup and inputs, sealed to node B's key. Agent A reads the VM (agents
    // watch every ImpVM) and gets ciphertext it cannot open, whether it names its own key or B's.
    const keyA = await generateNodeKeyPair();
    const keyB = await generateNodeKeyPair();
    const vm = await createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS).create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "vm-b-sealed", namespace: NS }, spec: { templateRef: { name: "t" }, workload: { command: ["/bin/true"] } } } as unknown as ImpVM);
    const uid = vm.metadata.uid ?? "";
    const setup = JSON.stringify(await sealSetup(new TextEncoder().encode(`{"jit":"${canary}"}`), keyB, uid));
    const inputs = JSON.stringify(await sealSetup(new TextEncoder().encode(JSON.stringify({ v: 1, secrets: { creds: { token: canary } } })), keyB, uid, "inputs"));
    await createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS).patchStatus({ namespace: NS, name: "vm-b-sealed" }, { status: { phase: "Scheduled", nodeName: "node-b", setup: { state: "Minted", sealed: setup }, inputs: { sealed: inputs } } });
    const seenByA = await createResourceClient<ImpVM>(as("node-a"), IMP_VMS).get({ namespace: NS, name: "vm-b-sealed" });
    assert.ok(!JSON.stringify(seenByA).includes(canary), "the VM object holds only ciphertext");
    const sealedSetup = parseSealedSetup(seenByA.status?.setup?.sealed ?? "");
    const sealedInputs = parseSealedSetup(seenByA.status?.inputs?.sealed ?? "", "inputs");
    await assert.rejects(openSetup(sealedSetup, keyA, uid), /sealed to key/);
    await assert.rejects(openSetup({ ...sealedSetup, keyId: keyA.keyId }, keyA, uid), /authentication failed/);
    await assert.rejects(openSetup({ ...sealedInputs, keyId: keyA.keyId }, keyA, uid, "inputs"), /authentication failed/);
    assert.match(Buffer.from(await openSetup(sealedInputs, keyB, uid, "inputs")).toString("utf8"), new RegExp(canary), "node B's key opens them (the control)");
    // Nor can agent A take node B's sealed setup away (the status of a VM bound elsewhere).
    assert.match(await attempt(() => createResourceClient<ImpVM>(as("node-a"), IMP_VMS).patchStatus({ namespace: NS, name: "vm-b-sealed" }, { status: { inputs: null } } as never)), /only ImpVMs bound to its node \(node-a\)/);
  });
});
