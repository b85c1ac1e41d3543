import { readFileSync } from "node:fs";
import { readFile, readdir, rm, writeFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { processState, terminalError, waitFor } from "../shared/index.ts";
import { startControlPlane, type ControlPlaneState } from "./control-plane.ts";

/**
 * `imp dev cluster up|down|status`: a control plane that outlives the command that started it.
 * Its processes and paths are recorded in `<dir>/state.json`, which `down` uses to stop exactly
 * them. Each process is recorded with its kernel start time, so a pid reused after a reboot is
 * never signalled.
 */

const STATE_FILE = "state.json";

interface RecordedProcess {
  readonly pid: number;
  /** Field 22 of /proc/<pid>/stat: start time in clock ticks since boot. */
  readonly startTime: string;
}

interface DetachedState extends ControlPlaneState {
  readonly processes: Readonly<Record<string, RecordedProcess>>;
}

export async function clusterUp(dir: string, signal?: AbortSignal): Promise<ControlPlaneState & { startupMs: number }> {
  const existing = await readState(dir);
  if (existing !== undefined) {
    if (Object.values(existing.processes).some(isSameProcessRunning)) {
      throw terminalError("ClusterRunning", `Cannot start a dev cluster in ${dir}: one is running (kubeconfig ${existing.kubeconfigPath}); run \`imp dev cluster down\` first`);
    }
    await rm(dir, { recursive: true, force: true });
  } else if ((await readdir(dir).catch(() => [])).length > 0) {
    // Never delete a directory that this command did not create.
    throw terminalError("DirNotEmpty", `Cannot start a dev cluster in ${dir}: the directory is not empty and holds no dev cluster state; pick another --dir`);
  }
  await mkdir(dir, { recursive: true });
  const plane = await startControlPlane({ dir, detached: true, keepDir: true, ...(signal === undefined ? {} : { signal }) });
  const state = plane.state();
  const processes: Record<string, RecordedProcess> = {};
  for (const [name, pid] of Object.entries(state.pids)) {
    const startTime = pid === undefined ? undefined : await processStartTime(pid);
    if (pid !== undefined && startTime !== undefined) processes[name] = { pid, startTime };
  }
  const detached: DetachedState = { ...state, processes };
  await writeFile(join(dir, STATE_FILE), JSON.stringify(detached, null, 2));
  return { ...state, startupMs: plane.startupMs };
}

export async function clusterDown(dir: string, graceMs = 5_000): Promise<{ stopped: string[] }> {
  const state = await readState(dir);
  if (state === undefined) return { stopped: [] };
  const stopped: string[] = [];
  // Reverse start order: controller manager, API server, then etcd.
  for (const [name, proc] of Object.entries(state.processes).reverse()) {
    if (!isSameProcessRunning(proc)) continue;
    process.kill(proc.pid, "SIGTERM");
    try {
      await waitFor(`stop ${name}`, () => (isSameProcessRunning(proc) ? undefined : true), { timeoutMs: graceMs, intervalMs: 50 });
    } catch {
      if (isSameProcessRunning(proc)) process.kill(proc.pid, "SIGKILL");
    }
    stopped.push(name);
  }
  await rm(dir, { recursive: true, force: true });
  return { stopped };
}

export async function clusterStatus(dir: string): Promise<(ControlPlaneState & { running: Record<string, boolean> }) | undefined> {
  const state = await readState(dir);
  if (state === undefined) return undefined;
  const running = Object.fromEntries(Object.entries(state.processes).map(([name, proc]) => [name, isSameProcessRunning(proc)]));
  return { ...state, running };
}

async function readState(dir: string): Promise<DetachedState | undefined> {
  try {
    const state = JSON.parse(await readFile(join(dir, STATE_FILE), "utf8")) as Partial<DetachedState>;
    return state.processes === undefined ? undefined : (state as DetachedState);
  } catch {
    return undefined;
  }
}

/**
 * Whether a process this user started is running at that pid. Another user's process (EPERM) is
 * not ours: a recorded pid reused by someone else must never be signalled.
 */
export function isProcessAlive(pid: number): boolean {
  return processState(pid) === "alive";
}

function isSameProcessRunning(proc: RecordedProcess): boolean {
  return isProcessAlive(proc.pid) && processStartTimeSync(proc.pid) === proc.startTime;
}

async function processStartTime(pid: number): Promise<string | undefined> {
  try {
    return parseStartTime(await readFile(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

function processStartTimeSync(pid: number): string | undefined {
  try {
    return parseStartTime(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

/** Field 22 of /proc/<pid>/stat; the command name (field 2) may hold spaces and parentheses, so count from its closing one. */
export function parseStartTime(stat: string): string | undefined {
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return fields[19];
}
