import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { cgroupPids, listCgroups, removeCgroup, type CgroupLeaf } from "./cgroups.ts";
import type { SupervisorCgroupOptions } from "./launcher.ts";
import { killIfSame, liveness, type Liveness, type ProcessRef } from "./proc.ts";
import { readExitRecord, readIdentity, SUPERVISOR_FILES, type ExitRecord, type SupervisorIdentity } from "./records.ts";

/** One supervision directory found under the state dir. */
export interface SupervisedEntry {
  readonly dir: string;
  /** From supervisor.json, else exit.json; undefined when neither names it. */
  readonly vmId: string | undefined;
  readonly identity?: SupervisorIdentity;
  readonly exit?: ExitRecord;
  readonly supervisor: Liveness | "unknown";
  readonly process: Liveness | "unknown";
}

export interface SupervisionInventory {
  readonly entries: readonly SupervisedEntry[];
  readonly cgroups: readonly CgroupLeaf[];
  readonly emptyCgroupGroups: readonly { readonly vmId: string; readonly path: string }[];
}

export interface SweepPlan {
  /** Processes (VMMs, helpers) to kill first: their supervisors then record the exit and clean up. */
  readonly processes: readonly ProcessRef[];
  /** Supervisors to kill if they have not gone on their own. */
  readonly supervisors: readonly ProcessRef[];
  /** cgroups of dead VMs: remaining members are killed, then the directory removed. */
  readonly cgroups: readonly CgroupLeaf[];
  readonly cgroupGroups: readonly string[];
  readonly dirs: readonly string[];
  /** Supervision directories that name no VM (no identity, no exit record): reported, left alone. */
  readonly unknown: readonly string[];
}

const SUPERVISION_MARKERS: readonly string[] = [SUPERVISOR_FILES.identity, SUPERVISOR_FILES.exit, SUPERVISOR_FILES.lock];
const MAX_DEPTH = 4;

/** Finds supervision directories (holding supervisor.json, exit.json or supervisor.lock) up to 4 levels below `stateDir`. */
async function findSupervisionDirs(dir: string, depth: number, found: string[]): Promise<void> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return;
  }
  if (entries.some((e) => e.isFile() && SUPERVISION_MARKERS.includes(e.name))) {
    found.push(dir);
    return;
  }
  if (depth >= MAX_DEPTH) return;
  for (const e of entries) if (e.isDirectory()) await findSupervisionDirs(join(dir, e.name), depth + 1, found);
}

/** Observes every supervisor, supervised process, cgroup and supervision directory of this agent. */
export async function listSupervised(stateDir: string, cgroup?: SupervisorCgroupOptions): Promise<SupervisionInventory> {
  const dirs: string[] = [];
  await findSupervisionDirs(stateDir, 0, dirs);
  const entries: SupervisedEntry[] = [];
  for (const dir of dirs.sort()) {
    const identity = await readIdentity(dir).catch(() => undefined);
    const exit = await readExitRecord(dir).catch(() => undefined);
    entries.push({
      dir,
      vmId: identity?.vmId ?? exit?.vmId,
      ...(identity === undefined ? {} : { identity }),
      ...(exit === undefined ? {} : { exit }),
      supervisor: identity === undefined ? "unknown" : await liveness(identity.supervisor),
      process: identity === undefined ? "unknown" : await liveness(identity.process),
    });
  }
  const { leaves, emptyGroups } = cgroup === undefined ? { leaves: [], emptyGroups: [] } : await listCgroups(cgroup.root ?? "/sys/fs/cgroup", cgroup.parent);
  return { entries, cgroups: leaves, emptyCgroupGroups: emptyGroups };
}

/** What to remove: everything that maps to no live VM. Pure. */
export function decideSweep(inventory: SupervisionInventory, liveVmIds: Pick<ReadonlySet<string>, "has">): SweepPlan {
  const orphan = (vmId: string | undefined): boolean => vmId !== undefined && !liveVmIds.has(vmId);
  const dead = inventory.entries.filter((e) => orphan(e.vmId));
  const cgroups = inventory.cgroups.filter((c) => orphan(c.vmId));
  return {
    processes: dead.flatMap((e) => (e.identity !== undefined && e.process === "alive" ? [e.identity.process] : [])),
    supervisors: dead.flatMap((e) => (e.identity !== undefined && e.supervisor === "alive" ? [e.identity.supervisor] : [])),
    cgroups,
    cgroupGroups: [...new Set([...cgroups.map((c) => c.groupPath), ...inventory.emptyCgroupGroups.filter((g) => orphan(g.vmId)).map((g) => g.path)])].sort(),
    dirs: dead.map((e) => e.dir),
    unknown: inventory.entries.filter((e) => e.vmId === undefined).map((e) => e.dir),
  };
}

export interface SweepCounts {
  readonly processesKilled: number;
  readonly supervisorsKilled: number;
  /** Members of orphan cgroups that no supervisor accounted for. */
  readonly strayProcessesKilled: number;
  readonly cgroupsRemoved: number;
  readonly dirsRemoved: number;
  readonly unknownDirs: number;
  readonly errors: readonly string[];
}

export interface SweepOptions {
  readonly cgroup?: SupervisorCgroupOptions;
  /** How long supervisors get to record and clean up after their process was killed; default 5 s. */
  readonly graceMs?: number;
}

async function untilGone(refs: readonly ProcessRef[], timeoutMs: number): Promise<ProcessRef[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const alive: ProcessRef[] = [];
    for (const ref of refs) if ((await liveness(ref)) === "alive") alive.push(ref);
    if (alive.length === 0 || Date.now() > deadline) return alive;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Removes every supervised process, supervisor, cgroup and supervision directory under `stateDir`
 * that belongs to no VM in `liveVmIds`: kills the processes (each verified by pid and start time),
 * lets their supervisors record and clean up, kills supervisors that did not, then removes cgroups
 * and directories. Returns counts for metrics.
 */
export async function sweepSupervised(stateDir: string, liveVmIds: Pick<ReadonlySet<string>, "has">, options: SweepOptions = {}): Promise<SweepCounts> {
  const plan = decideSweep(await listSupervised(stateDir, options.cgroup), liveVmIds);
  const errors: string[] = [];
  const grace = options.graceMs ?? 5_000;
  let processesKilled = 0;
  for (const ref of plan.processes) if (await killIfSame(ref)) processesKilled++;
  const stillProcesses = await untilGone(plan.processes, grace);
  for (const ref of stillProcesses) errors.push(`process ${ref.pid} still alive after SIGKILL`);
  let supervisorsKilled = 0;
  for (const ref of await untilGone(plan.supervisors, grace)) if (await killIfSame(ref)) supervisorsKilled++;
  for (const ref of await untilGone(plan.supervisors, grace)) errors.push(`supervisor ${ref.pid} still alive after SIGKILL`);

  let strayProcessesKilled = 0;
  let cgroupsRemoved = 0;
  for (const leaf of plan.cgroups) {
    // Members are ours by construction (they are in this VM's cgroup), so killing them by pid is safe.
    const deadline = Date.now() + grace;
    for (let pids = await cgroupPids(leaf.path); pids.length > 0 && Date.now() < deadline; pids = await cgroupPids(leaf.path)) {
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
          strayProcessesKilled++;
        } catch {
          // already gone
        }
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    try {
      if (await removeCgroup(leaf.path)) cgroupsRemoved++;
    } catch (err) {
      errors.push(`cgroup ${leaf.path}: ${String(err)}`);
    }
  }
  for (const group of plan.cgroupGroups) {
    try {
      await removeCgroup(group);
    } catch (err) {
      errors.push(`cgroup ${group}: ${String(err)}`);
    }
  }
  let dirsRemoved = 0;
  for (const dir of plan.dirs) {
    try {
      await rm(dir, { recursive: true, force: true });
      dirsRemoved++;
    } catch (err) {
      errors.push(`directory ${dir}: ${String(err)}`);
    }
  }
  return { processesKilled, supervisorsKilled, strayProcessesKilled, cgroupsRemoved, dirsRemoved, unknownDirs: plan.unknown.length, errors };
}
