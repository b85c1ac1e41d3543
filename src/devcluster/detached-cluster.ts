import { readFile, rm, writeFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { terminalError, waitFor } from "../shared/index.ts";
import { startControlPlane, type ControlPlaneState } from "./control-plane.ts";

/**
 * `imp dev cluster up|down|status`: a control plane that outlives the command that started it.
 * Its processes and paths are recorded in `<dir>/state.json`, which `down` uses to stop exactly them.
 */

const STATE_FILE = "state.json";

export async function clusterUp(dir: string): Promise<ControlPlaneState & { startupMs: number }> {
  const existing = await readState(dir);
  if (existing !== undefined && Object.values(existing.pids).some((pid) => pid !== undefined && isProcessAlive(pid))) {
    throw terminalError("ClusterRunning", `Cannot start a dev cluster in ${dir}: one is running (kubeconfig ${existing.kubeconfigPath}); run \`imp dev cluster down\` first`);
  }
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const plane = await startControlPlane({ dir, detached: true, keepDir: true });
  const state = plane.state();
  await writeFile(join(dir, STATE_FILE), JSON.stringify(state, null, 2));
  return { ...state, startupMs: plane.startupMs };
}

export async function clusterDown(dir: string, graceMs = 5_000): Promise<{ stopped: string[] }> {
  const state = await readState(dir);
  if (state === undefined) return { stopped: [] };
  const stopped: string[] = [];
  // Reverse start order: controller manager, API server, then etcd.
  for (const [name, pid] of Object.entries(state.pids).reverse()) {
    if (pid === undefined || !isProcessAlive(pid)) continue;
    process.kill(pid, "SIGTERM");
    try {
      await waitFor(`stop ${name}`, () => (isProcessAlive(pid) ? undefined : true), { timeoutMs: graceMs, intervalMs: 50 });
    } catch {
      if (isProcessAlive(pid)) process.kill(pid, "SIGKILL");
    }
    stopped.push(name);
  }
  await rm(dir, { recursive: true, force: true });
  return { stopped };
}

export async function clusterStatus(dir: string): Promise<(ControlPlaneState & { running: Record<string, boolean> }) | undefined> {
  const state = await readState(dir);
  if (state === undefined) return undefined;
  const running = Object.fromEntries(Object.entries(state.pids).map(([name, pid]) => [name, pid !== undefined && isProcessAlive(pid)]));
  return { ...state, running };
}

async function readState(dir: string): Promise<ControlPlaneState | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, STATE_FILE), "utf8")) as ControlPlaneState;
  } catch {
    return undefined;
  }
}

/** Whether a process with this pid exists (signal 0 probes without delivering anything). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
