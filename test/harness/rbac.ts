/**
 * Imp installed on a control plane as a cluster admin would (docs/install.md): deploy/rbac applied,
 * and for each ServiceAccount a kubeconfig with a token minted for it (TokenRequest, as a pod's
 * projected token), so what runs with it can do exactly what the shipped roles allow.
 *
 * Agents get their node's token: deploy/rbac's admission policy lets an agent write only its own
 * node's objects, and it learns the node from the token, which the API server fills in for a token
 * bound to a Pod on that node. Without a kubelet here, each node is a Node object and its agent a
 * Pod object bound to it (nothing runs it; the token is what a DaemonSet Pod there would get).
 */
import { execFile } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import type { ControlPlane } from "../../src/devcluster/index.ts";

const execFileAsync = promisify(execFile);

/** Imp's own namespace: the operator's and agents' ServiceAccounts and Leases. */
export const IMP_SYSTEM = "imp-system";
export const RBAC_DIR = join(resolve(import.meta.dirname, "../.."), "deploy/rbac");

export type ImpAccount = "imp-operator" | "imp-agent";

/**
 * Applies deploy/rbac, then writes a token kubeconfig for each account to its path (a token bound to
 * nothing: an agent's is refused its writes), and for each node in `agentNodes` one of imp-agent
 * bound to that node's agent Pod.
 */
export async function installRbac(plane: ControlPlane, kubeconfigs: Partial<Record<ImpAccount, string>>, agentNodes: Readonly<Record<string, string>> = {}): Promise<void> {
  const kubectl = async (args: readonly string[], input?: string): Promise<string> => {
    const child = execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, ...args], { timeout: 60_000 });
    if (input !== undefined) child.child.stdin?.end(input);
    return (await child).stdout;
  };
  await kubectl(["apply", "-f", RBAC_DIR]);
  const admin = parseYaml(await readFile(plane.kubeconfigPath, "utf8")) as { users: Array<{ name: string; user: Record<string, string> }>; contexts: Array<{ context: { user: string } }> };
  const write = async (account: string, token: string, path: string): Promise<void> => {
    const config = structuredClone(admin);
    config.users = [{ name: account, user: { token } }];
    for (const c of config.contexts) c.context.user = account;
    await writeFile(path, stringifyYaml(config), { mode: 0o600 });
  };
  for (const [account, path] of Object.entries(kubeconfigs)) {
    await write(account, (await kubectl(["-n", IMP_SYSTEM, "create", "token", account, "--duration", "24h"])).trim(), path);
  }
  for (const [node, path] of Object.entries(agentNodes)) await write("imp-agent", await agentToken(kubectl, node), path);
}

/** A Node object `node` and an imp-agent Pod object bound to it; returns a token bound to that Pod (it names the node). */
export async function agentToken(kubectl: (args: readonly string[], input?: string) => Promise<string>, node: string): Promise<string> {
  const pod = `imp-agent-${node}`;
  await kubectl(["apply", "-f", "-"], stringifyYaml({ apiVersion: "v1", kind: "Node", metadata: { name: node, labels: { "imp.dev/test-node": "true" } } }));
  await kubectl(["apply", "-f", "-"], stringifyYaml({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: pod, namespace: IMP_SYSTEM, labels: { "app.kubernetes.io/name": "imp", "app.kubernetes.io/component": "agent" } },
    spec: { nodeName: node, serviceAccountName: "imp-agent", automountServiceAccountToken: false, containers: [{ name: "agent", image: "imp.invalid/agent:placeholder" }] },
  }));
  return (await kubectl(["-n", IMP_SYSTEM, "create", "token", "imp-agent", "--bound-object-kind", "Pod", "--bound-object-name", pod, "--duration", "24h"])).trim();
}
