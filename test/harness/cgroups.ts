/**
 * Cgroups as a container runtime makes them, for tests that stand in for one (a container's cgroup,
 * a kubelet's cgroup root): one directory of the same name in every hierarchy.
 */
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

const TOP = "/sys/fs/cgroup";

/** Every hierarchy's root directory: the v1 controllers (not their symlinked aliases) and a v2 mount, or the pure v2 root. */
export async function cgroupHierarchies(): Promise<string[]> {
  if (existsSync(join(TOP, "cgroup.procs"))) return [TOP];
  return (await readdir(TOP, { withFileTypes: true })).filter((e) => e.isDirectory() && existsSync(join(TOP, e.name, "cgroup.procs"))).map((e) => join(TOP, e.name));
}

/**
 * Creates cgroup `name` in every hierarchy and returns the directories. cpuset refuses processes
 * until a cgroup has CPUs and memory nodes: it gets its parent's, as runc gives them.
 */
export async function createInEveryHierarchy(name: string): Promise<string[]> {
  const dirs: string[] = [];
  for (const hierarchy of await cgroupHierarchies()) {
    const dir = join(hierarchy, name);
    await mkdir(dir, { recursive: true });
    for (const f of ["cpuset.cpus", "cpuset.mems"]) if (existsSync(join(dir, f))) await writeFile(join(dir, f), await readFile(join(hierarchy, f)));
    dirs.push(dir);
  }
  return dirs;
}

/** Every process in cgroup `name` or below it, in any hierarchy. */
export async function processesInTree(name: string): Promise<number[]> {
  const pids = new Set<number>();
  const walk = async (d: string): Promise<void> => {
    for (const line of (await readFile(join(d, "cgroup.procs"), "utf8").catch(() => "")).split("\n")) if (line !== "") pids.add(Number(line));
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) if (e.isDirectory()) await walk(join(d, e.name));
  };
  for (const hierarchy of await cgroupHierarchies()) await walk(join(hierarchy, name));
  return [...pids];
}

/** Removes the cgroup tree `name` of every hierarchy (deepest first); its processes are gone by then. */
export async function removeCgroupTrees(name: string): Promise<void> {
  for (const hierarchy of await cgroupHierarchies()) {
    const root = join(hierarchy, name);
    if (!existsSync(root)) continue;
    const dirs: string[] = [];
    const walk = async (d: string): Promise<void> => {
      for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) if (e.isDirectory()) await walk(join(d, e.name));
      dirs.push(d);
    };
    await walk(root);
    for (const d of dirs) await rmdir(d).catch(() => undefined);
  }
}

/**
 * SIGKILLs whatever `find` names, again and again until it names nothing (or `rounds` pass): a
 * dying process's children, or a shim that restarts a container, can appear meanwhile. Returns how
 * many processes it killed.
 */
export async function killUntilGone(find: () => Promise<Iterable<number>>, rounds = 50, pauseMs = 100): Promise<number> {
  const killed = new Set<number>();
  for (let round = 0; round < rounds; round++) {
    const pids = [...(await find())];
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
        killed.add(pid);
      } catch {
        // Gone already.
      }
    }
    await new Promise((r) => setTimeout(r, pauseMs));
  }
  return killed.size;
}

/** SIGKILLs every process in cgroup tree `name` (all hierarchies) until none is left, then removes the tree. Returns how many it killed. */
export async function killCgroupTree(name: string): Promise<number> {
  const killed = await killUntilGone(() => processesInTree(name));
  await removeCgroupTrees(name);
  return killed;
}
