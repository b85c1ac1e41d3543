/**
 * Cgroups as a container runtime makes them, for tests that stand in for one (a container's cgroup,
 * a kubelet's cgroup root): one directory of the same name in every hierarchy.
 */
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
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
