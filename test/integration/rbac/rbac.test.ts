/**
 * deploy/rbac on a real API server, asked through each ServiceAccount's own token (a
 * SelfSubjectAccessReview, as `kubectl auth can-i` sends it): the rights the end-to-end and fault
 * suites need are granted (they run the operator and agents with these tokens), and the rights a
 * compromised operator or agent must not have are refused. A role widened by accident fails here.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { buildAllCrds } from "../../../src/api/index.ts";
import { installCrds } from "../../../src/kube/index.ts";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { IMP_SYSTEM, installRbac, type ImpAccount } from "../../harness/rbac.ts";

const execFileAsync = promisify(execFile);

/** [verb, resource or resource/subresource, namespace or "" for cluster scope]. */
type Ask = readonly [string, string, string];

const OPERATOR_MAY: readonly Ask[] = [
  ["create", "impvms.imp.dev", "ci"], ["delete", "impvms.imp.dev", "ci"], ["watch", "impvms.imp.dev", ""],
  ["patch", "impvms.imp.dev/status", "ci"], ["patch", "impvmrunnerpools.imp.dev", "ci"], ["patch", "impvmrunnerpools.imp.dev/status", "ci"],
  ["patch", "impnodes.imp.dev", ""], ["list", "impvmtemplates.imp.dev", ""],
  ["get", "secrets", "ci"], // forge credentials, webhook secrets, and the Secrets a VM reads (it seals them to the VM's node)
  ["watch", "nodes", ""], ["create", "events", "ci"],
  ["patch", "leases.coordination.k8s.io", IMP_SYSTEM], ["watch", "leases.coordination.k8s.io", IMP_SYSTEM],
  ["update", "impvms.imp.dev/finalizers", "ci"], // for owner references that block deletion
];
const OPERATOR_MUST_NOT: readonly Ask[] = [
  ["list", "secrets", "ci"], ["watch", "secrets", ""], // holds no copy of Secrets it was not asked for
  ["update", "secrets", "ci"], ["patch", "secrets", "ci"], ["create", "secrets", "ci"], ["delete", "secrets", "ci"], // never writes one (App credentials included; setups live sealed in the ImpVM's status)
  ["patch", "impnodes.imp.dev/status", ""], // a node's status is its agent's word
  ["patch", "leases.coordination.k8s.io", "default"], ["create", "leases.coordination.k8s.io", "kube-system"],
  ["create", "customresourcedefinitions.apiextensions.k8s.io", ""],
  ["create", "impvmrunnerpools.imp.dev", "ci"], ["delete", "impvmrunnerpools.imp.dev", "ci"], // pools are the user's
  ["delete", "nodes", ""], ["create", "pods", "ci"], ["create", "clusterrolebindings.rbac.authorization.k8s.io", ""],
];
const AGENT_MAY: readonly Ask[] = [
  ["watch", "impvms.imp.dev", ""], ["patch", "impvms.imp.dev", "ci"], ["patch", "impvms.imp.dev/status", "ci"],
  ["create", "impnodes.imp.dev", ""], ["patch", "impnodes.imp.dev/status", ""],
  ["get", "impvmtemplates.imp.dev", "ci"], ["get", "impvmclasses.imp.dev", ""],
  ["create", "events", "ci"],
  ["create", "leases.coordination.k8s.io", IMP_SYSTEM], ["patch", "leases.coordination.k8s.io", IMP_SYSTEM],
  // Retiring its node on uninstall; the admission policy confines both to its own (agent-node-restriction.test.ts).
  ["delete", "impnodes.imp.dev", ""], ["delete", "leases.coordination.k8s.io", IMP_SYSTEM],
];
const AGENT_MUST_NOT: readonly Ask[] = [
  ["create", "impvms.imp.dev", "ci"], ["delete", "impvms.imp.dev", "ci"], // VMs are the operator's to make and end
  ["patch", "impvmrunnerpools.imp.dev", "ci"], ["get", "impvmrunnerpools.imp.dev", "ci"],
  ["patch", "impnodes.imp.dev", ""], // the scheduler's reservations are not the agent's to move
  // No Secret at all, anywhere: a node a job escaped to reaches no forge credential or tenant Secret.
  ["get", "secrets", "ci"], ["get", "secrets", "kube-system"], ["get", "secrets", IMP_SYSTEM], ["delete", "secrets", "ci"],
  ["list", "secrets", "ci"], ["watch", "secrets", ""], ["create", "secrets", "ci"],
  ["create", "leases.coordination.k8s.io", "default"], ["delete", "leases.coordination.k8s.io", "default"],
  ["list", "nodes", ""], ["create", "pods", "ci"],
];

describe("deploy/rbac: least privilege, asked through each ServiceAccount's token", { timeout: 300_000 }, () => {
  let plane: ControlPlane;
  let dir: string;
  const kubeconfig = (account: ImpAccount): string => join(dir, `${account}.kubeconfig`);

  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    dir = await mkdtemp(join(tmpdir(), "imp-rbac-"));
    await installCrds(plane.kubeConfig, buildAllCrds());
    await installRbac(plane, { "imp-operator": kubeconfig("imp-operator"), "imp-agent": kubeconfig("imp-agent") });
  });

  after(async () => {
    await plane?.stop();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  async function can(account: ImpAccount, [verb, resource, namespace]: Ask): Promise<boolean> {
    // "kind/x" means the object named x to can-i; a subresource is its own flag.
    const [kind = "", subresource] = resource.split("/");
    const args = ["--kubeconfig", kubeconfig(account), "auth", "can-i", verb, kind, ...(subresource === undefined ? [] : [`--subresource=${subresource}`]), ...(namespace === "" ? [] : ["-n", namespace])];
    const answer = await execFileAsync(plane.binaries.kubectl, args, { timeout: 60_000 }).then(
      ({ stdout }) => stdout.trim(),
      (err: { code?: number; stdout?: string; stderr?: string }) => {
        // can-i exits 1 for "no"; anything else (a bad token, an unreachable server) is a failure.
        if (err.code === 1 && err.stdout?.trim() === "no") return "no";
        throw new Error(`kubectl auth can-i ${verb} ${resource} as ${account}: ${err.stderr ?? String(err)}`);
      },
    );
    return answer === "yes";
  }

  async function denied(account: ImpAccount, asks: readonly Ask[], want: boolean): Promise<string[]> {
    const wrong: string[] = [];
    for (const ask of asks) if ((await can(account, ask)) !== want) wrong.push(`${ask[0]} ${ask[1]}${ask[2] === "" ? "" : ` in ${ask[2]}`}`);
    return wrong;
  }

  it("the token is the ServiceAccount's own, not the admin's", async () => {
    const { stdout } = await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", kubeconfig("imp-agent"), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], { timeout: 60_000 });
    assert.equal(stdout.trim(), `system:serviceaccount:${IMP_SYSTEM}:imp-agent`);
  });

  it("the operator may do what the runner path needs", async () => {
    assert.deepEqual(await denied("imp-operator", OPERATOR_MAY, true), [], "refused to the operator");
  });

  it("the operator may not read Secrets wholesale, write node status, touch Leases outside imp-system, or escalate", async () => {
    assert.deepEqual(await denied("imp-operator", OPERATOR_MUST_NOT, false), [], "granted to the operator");
  });

  it("an agent may do what its node's VMs need", async () => {
    assert.deepEqual(await denied("imp-agent", AGENT_MAY, true), [], "refused to the agent");
  });

  it("an agent may not create or delete VMs, move reservations, read any Secret, or reach beyond its Lease", async () => {
    assert.deepEqual(await denied("imp-agent", AGENT_MUST_NOT, false), [], "granted to the agent");
  });
});
