/**
 * deploy/rbac's admission policy (agent-node-restriction.yaml) on a real API server: an agent's
 * token bound to its Pod on node A may write node A's objects and is refused every write to node
 * B's — its ImpNode and status, its Lease, the ImpVMs bound there (metadata and status), their
 * setup Secrets — and may not rebind its own VMs; a token bound to no Pod (so naming no node) is
 * refused even its own node's writes. RBAC alone allows all of these: this is what the kubelet's
 * NodeRestriction gives kubelets, for Imp's agents.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { API_VERSION, LABELS, SETUP_SECRET, type ImpNode, type ImpVM, buildAllCrds } from "../../../src/api/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { createResourceClient, LEASE_RESOURCE, type KubeObject, type Lease, installCrds } from "../../../src/kube/index.ts";
import { IMP_NODES, IMP_VMS, SECRETS, type SecretObject } from "../../../src/operator/index.ts";
import { ImpError } from "../../../src/shared/index.ts";
import { IMP_SYSTEM, installRbac } from "../../harness/rbac.ts";

const execFileAsync = promisify(execFile);
const NS = "ci";

describe("deploy/rbac's admission policy: an agent writes only its own node's objects", { timeout: 300_000 }, () => {
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
    await installRbac(plane, { "imp-agent": path("unbound") }, { "node-a": path("node-a"), "node-b": path("node-b") });
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
    const secretsA = createResourceClient<SecretObject>(as("node-a"), SECRETS);
    const secretsB = createResourceClient<SecretObject>(as("node-b"), SECRETS);
    const admin = { vms: createResourceClient<ImpVM>(plane.kubeConfig, IMP_VMS), secrets: createResourceClient<SecretObject>(plane.kubeConfig, SECRETS) };
    const now = new Date().toISOString();
    const lease = (node: string): Lease => ({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: `imp-agent-${node}`, namespace: IMP_SYSTEM }, spec: { holderIdentity: node, leaseDurationSeconds: 40, renewTime: now.replace("Z", "000Z") } }) as unknown as Lease;

    // Agent B's own: its ImpNode, its status, its Lease.
    assert.equal(await attempt(() => nodesB.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-b" }, spec: { unschedulable: false } } as ImpNode)), "allowed");
    assert.equal(await attempt(() => nodesB.patchStatus({ name: "node-b" }, { status: { kvm: false } })), "allowed");
    assert.equal(await attempt(() => leasesB.create(lease("node-b"))), "allowed");

    // A VM bound to node B (the operator binds it), and its setup Secret labelled with node B.
    const vm = await admin.vms.create({ apiVersion: API_VERSION, kind: "ImpVM", metadata: { name: "vm-b", namespace: NS }, spec: { templateRef: { name: "t" }, workload: { command: ["/bin/true"] } } } as unknown as ImpVM);
    await admin.vms.patchStatus({ namespace: NS, name: "vm-b" }, { status: { phase: "Scheduled", nodeName: "node-b" } });
    const secret = (name: string): KubeObject => ({ apiVersion: "v1", kind: "Secret", metadata: { name, namespace: NS, labels: { [LABELS.node]: "node-b", [LABELS.vm]: "vm-b" } }, type: SETUP_SECRET.type, data: { [SETUP_SECRET.sealedKey]: Buffer.from("sealed").toString("base64") } }) as KubeObject;
    await admin.secrets.create(secret("vm-b-setup") as SecretObject);
    await admin.secrets.create(secret("vm-b-setup-2") as SecretObject);

    // Agent A against node B's objects: every write refused, with the policy's reason.
    const refusedToA: Record<string, string> = {
      "create ImpNode node-b": await attempt(() => nodesA.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-c" }, spec: { unschedulable: false } } as ImpNode)),
      "patch ImpNode node-b's status": await attempt(() => nodesA.patchStatus({ name: "node-b" }, { status: { kvm: true } })),
      "patch ImpNode node-b": await attempt(() => nodesA.patch({ name: "node-b" }, { metadata: { labels: { owned: "by-a" } } })),
      "update node B's Lease": await attempt(() => leasesA.patch({ namespace: IMP_SYSTEM, name: "imp-agent-node-b" }, { spec: { holderIdentity: "node-a" } } as never)),
      "create a Lease for node B": await attempt(() => leasesA.create({ ...lease("node-x"), metadata: { name: "imp-agent-node-x", namespace: IMP_SYSTEM } } as Lease)),
      "patch status of a VM on node B": await attempt(() => vmsA.patchStatus({ namespace: NS, name: "vm-b" }, { status: { phase: "Failed", reason: "NodeLost" } })),
      "patch a VM on node B (its finalizer)": await attempt(() => vmsA.patch({ namespace: NS, name: "vm-b" }, { metadata: { finalizers: ["imp.dev/teardown"] } })),
      "delete the setup Secret of a VM on node B": await attempt(() => secretsA.delete({ namespace: NS, name: "vm-b-setup" })),
      "delete ImpNode node-b": await attempt(() => nodesA.delete({ name: "node-b" })),
      "delete node B's Lease": await attempt(() => leasesA.delete({ namespace: IMP_SYSTEM, name: "imp-agent-node-b" })),
    };
    for (const [what, outcome] of Object.entries(refusedToA)) assert.notEqual(outcome, "allowed", `agent A was allowed to ${what}`);
    assert.match(refusedToA["patch status of a VM on node B"] ?? "", /only ImpVMs bound to its node \(node-a\)/);
    assert.match(refusedToA["delete the setup Secret of a VM on node B"] ?? "", /setup Secrets of VMs bound to its node \(node-a\)/);
    // Agents may delete ImpNodes and Leases (an uninstall retires each node), so the policy, not RBAC, refuses these.
    assert.match(refusedToA["delete ImpNode node-b"] ?? "", /only its own ImpNode \(node-a\), not node-b/);
    assert.match(refusedToA["delete node B's Lease"] ?? "", /only its own Lease \(imp-agent-node-a\)/);

    // Agent B on its own VM: status and finalizer pass; rebinding it to node A does not.
    assert.equal(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { phase: "Preparing" } })), "allowed");
    assert.equal(await attempt(() => vmsB.patch({ namespace: NS, name: "vm-b" }, { metadata: { finalizers: ["imp.dev/teardown"] } })), "allowed");
    assert.notEqual(await attempt(() => vmsB.patchStatus({ namespace: NS, name: "vm-b" }, { status: { nodeName: "node-a" } })), "allowed", "an agent cannot move a VM to another node");
    assert.equal(await attempt(() => secretsB.delete({ namespace: NS, name: "vm-b-setup" })), "allowed");
    // Retiring its node (an uninstall): its own Lease and ImpNode.
    assert.equal(await attempt(() => leasesB.delete({ namespace: IMP_SYSTEM, name: "imp-agent-node-b" })), "allowed");
    assert.equal(await attempt(() => nodesB.delete({ name: "node-b" })), "allowed");

    // A token bound to no Pod names no node: refused even what would be its own.
    const unbound = createResourceClient<ImpNode>(as("unbound"), IMP_NODES);
    const noNode = await attempt(() => unbound.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name: "node-z" }, spec: { unschedulable: false } } as ImpNode));
    assert.match(noNode, /names no node: run the agent as its DaemonSet's Pod/);
    assert.ok(vm.metadata.uid !== undefined);
  });
});
