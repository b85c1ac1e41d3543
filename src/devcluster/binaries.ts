import { access, constants } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { terminalError } from "../shared/index.ts";

/** Versions built by scripts/build-test-binaries.sh; keep the two in step. */
export const KUBE_VERSION = "v1.36.3";
export const ETCD_VERSION = "v3.6.8";

export interface ControlPlaneBinaries {
  readonly etcd: string;
  readonly kubeApiserver: string;
  readonly kubeControllerManager: string;
  readonly kubectl: string;
}

const repoRoot = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/** The cache the setup script builds into: `$IMP_CACHE`, else `<repo>/.cache`. */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return env["IMP_CACHE"] ?? join(repoRoot, ".cache");
}

/** Paths of the cached control-plane binaries; throws a terminal error naming the setup step when one is missing. */
export async function findBinaries(env: NodeJS.ProcessEnv = process.env): Promise<ControlPlaneBinaries> {
  const bin = join(cacheDir(env), "bin");
  const found: ControlPlaneBinaries = {
    etcd: join(bin, `etcd-${ETCD_VERSION}`, "etcd"),
    kubeApiserver: join(bin, `kube-${KUBE_VERSION}`, "kube-apiserver"),
    kubeControllerManager: join(bin, `kube-${KUBE_VERSION}`, "kube-controller-manager"),
    kubectl: join(bin, `kube-${KUBE_VERSION}`, "kubectl"),
  };
  for (const path of Object.values(found)) {
    try {
      await access(path, constants.X_OK);
    } catch (err) {
      throw terminalError("BinaryMissing", `Cannot start the control plane: ${path} is missing; run scripts/setup.sh`, {
        cause: err,
        context: { path },
      });
    }
  }
  return found;
}
