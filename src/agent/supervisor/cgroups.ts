import { readdir, readFile, rmdir } from "node:fs/promises";
import { join } from "node:path";

/**
 * The agent's view of the supervisors' cgroups, for the sweep: the same layout rule as the supervisor
 * (pure v2 when the root offers the memory controller, else v1 memory at <root>/memory), the same
 * `<parent>/<vmId>/<process name>` tree.
 */
export interface CgroupLeaf {
  readonly vmId: string;
  readonly name: string;
  readonly path: string;
  readonly groupPath: string;
  readonly pids: readonly number[];
}

export async function memoryMount(root: string): Promise<string | undefined> {
  try {
    const controllers = await readFile(join(root, "cgroup.controllers"), "utf8");
    if (controllers.split(/\s+/).includes("memory")) return root;
  } catch {
    // not a v2 mount
  }
  try {
    await readFile(join(root, "memory", "memory.limit_in_bytes"), "utf8");
    return join(root, "memory");
  } catch {
    return undefined;
  }
}

export async function cgroupPids(path: string): Promise<number[]> {
  try {
    return (await readFile(join(path, "cgroup.procs"), "utf8")).split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

async function subdirs(path: string): Promise<string[]> {
  try {
    return (await readdir(path, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name).sort();
  } catch {
    return [];
  }
}

/** Every leaf under `<mount>/<parent>`, and each VM group directory that has no leaf left. */
export async function listCgroups(root: string, parent: string): Promise<{ leaves: CgroupLeaf[]; emptyGroups: { vmId: string; path: string }[] }> {
  const mount = await memoryMount(root);
  const leaves: CgroupLeaf[] = [];
  const emptyGroups: { vmId: string; path: string }[] = [];
  if (mount === undefined) return { leaves, emptyGroups };
  const base = join(mount, parent);
  for (const vmId of await subdirs(base)) {
    const groupPath = join(base, vmId);
    const names = await subdirs(groupPath);
    if (names.length === 0) emptyGroups.push({ vmId, path: groupPath });
    for (const name of names) {
      const path = join(groupPath, name);
      leaves.push({ vmId, name, path, groupPath, pids: await cgroupPids(path) });
    }
  }
  return { leaves, emptyGroups };
}

/** Removes a cgroup directory; one whose last process just died may stay busy for a moment. */
export async function removeCgroup(path: string, timeoutMs = 5_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await rmdir(path);
      return true;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return false;
      if (code !== "EBUSY" || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}
