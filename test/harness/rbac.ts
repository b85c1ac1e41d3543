/**
 * Imp installed on a control plane as a cluster admin would (docs/install.md): deploy/rbac applied,
 * and for each ServiceAccount a kubeconfig with a token minted for it (TokenRequest, as a pod's
 * projected token), so what runs with it can do exactly what the shipped roles allow.
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

/** Applies deploy/rbac, then writes a token kubeconfig for each account to its path. */
export async function installRbac(plane: ControlPlane, kubeconfigs: Partial<Record<ImpAccount, string>>): Promise<void> {
  const kubectl = async (args: readonly string[]): Promise<string> => (await execFileAsync(plane.binaries.kubectl, ["--kubeconfig", plane.kubeconfigPath, ...args], { timeout: 60_000 })).stdout;
  await kubectl(["apply", "-f", RBAC_DIR]);
  const admin = parseYaml(await readFile(plane.kubeconfigPath, "utf8")) as { users: Array<{ name: string; user: Record<string, string> }>; contexts: Array<{ context: { user: string } }> };
  for (const [account, path] of Object.entries(kubeconfigs)) {
    const token = (await kubectl(["-n", IMP_SYSTEM, "create", "token", account, "--duration", "24h"])).trim();
    const config = structuredClone(admin);
    config.users = [{ name: account, user: { token } }];
    for (const c of config.contexts) c.context.user = account;
    await writeFile(path, stringifyYaml(config), { mode: 0o600 });
  }
}
