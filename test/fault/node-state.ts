/**
 * What one simulated node holds on the host, read from the host itself (not from the agent's view):
 * live processes, unix sockets, VM disks and directories under its state dir, taps (VM ports) in its
 * network namespace, and per-VM cgroups under its cgroup parent. The invariant checker (I5) compares
 * this with the ImpVMs that may still own something; a fault case can also ask about one VM uid.
 *
 * Attribution: a process belongs to a VM when its command line names the VM's directory
 * (`<stateDir>/vms/<uid>`) or the uid; a port by the alias the network manager writes on it
 * (`imp-vm <ip> <egress> <uid>`); a cgroup by its directory `<parent>/<uid>`; files by their path.
 * Whatever mentions the node but no uid is reported with `uid` undefined — a leftover of nobody.
 */
import { execFile } from "node:child_process";
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { promisify } from "node:util";

const exec = promisify(execFile);

export interface SimulatedNode {
  readonly nodeName: string;
  readonly stateDir: string;
  /** The node's network namespace; undefined = the host's (then only ports with an Imp alias count). */
  readonly netns?: string;
  /** The agent's cgroupParent, e.g. `imp/<nodeName>`. */
  readonly cgroupParent: string;
  /** The network's tapPrefix (default "imp-"): ports named so count even without an alias. */
  readonly tapPrefix?: string;
  /** Pids never to count as a VM's even if they name a VM directory (e.g. a test's own helper). */
  readonly agentPids?: readonly number[];
}

export type NodeResourceKind = "process" | "socket" | "tap" | "cgroup" | "disk" | "vm-dir";

export interface NodeResource {
  readonly node: string;
  readonly kind: NodeResourceKind;
  /** The VM uid it belongs to; undefined when nothing says whose it is. */
  readonly uid: string | undefined;
  /** For a person: pid and command, path, or link name. */
  readonly detail: string;
}

/** Where cgroup hierarchies with per-VM groups may live (v1 memory, hybrid's v2, pure v2). */
export const CGROUP_MOUNTS = ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"] as const;

/** Everything of `node` on this host, or (with `uid`) only what belongs to that VM. */
export async function readNodeState(node: SimulatedNode, filter: { readonly uid?: string } = {}): Promise<NodeResource[]> {
  const parts = await Promise.all([processes(node, filter.uid), files(node), ports(node), cgroups(node)]);
  const all = parts.flat();
  return filter.uid === undefined ? all : all.filter((r) => r.uid === filter.uid);
}

/** The uid in a path or command line that names `<stateDir>/vms/<uid>`, if any. */
export function uidInText(stateDir: string, text: string): string | undefined {
  const vms = join(stateDir, "vms") + sep;
  const at = text.indexOf(vms);
  if (at < 0) return undefined;
  const m = /^[A-Za-z0-9][A-Za-z0-9._-]*/.exec(text.slice(at + vms.length));
  return m?.[0];
}

/** Whether `text` names `dir` itself or something under it (not merely a sibling with a longer name). */
export function mentionsPath(text: string, dir: string): boolean {
  for (let at = text.indexOf(dir); at >= 0; at = text.indexOf(dir, at + 1)) {
    const next = text[at + dir.length];
    if (next === undefined || next === sep || /[\s,:=;"']/.test(next)) return true;
  }
  return false;
}

/**
 * Live (non-zombie) processes other than this one whose command line names the node's VM directory
 * `<stateDir>/vms` (every VMM and supervisor names its VM's files there) or `uid`. The agent itself
 * and its image tools name the state dir too, but not `vms/`: they are the node's own, not a VM's.
 */
async function processes(node: SimulatedNode, uid: string | undefined): Promise<NodeResource[]> {
  const out: NodeResource[] = [];
  const entries = await readdir("/proc").catch(() => [] as string[]);
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid || node.agentPids?.includes(Number(entry)) === true) continue;
    const cmdline = (await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "")).replaceAll("\0", " ").trim();
    const mentionsNode = mentionsPath(cmdline, join(node.stateDir, "vms"));
    const mentionsUid = uid !== undefined && cmdline.includes(uid);
    if (!mentionsNode && !mentionsUid) continue;
    const statText = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    // Zombies (state Z) are gone for every purpose but the parent's wait; a vanished pid too.
    if (statText === "" || /\) Z /.test(statText)) continue;
    const comm = (await readFile(`/proc/${entry}/comm`, "utf8").catch(() => "?")).trim();
    const owner = mentionsUid ? uid : uidInText(node.stateDir, cmdline);
    out.push({ node: node.nodeName, kind: "process", uid: owner, detail: `pid ${entry} ${comm}: ${cmdline.slice(0, 200)}` });
  }
  return out;
}

/**
 * The longest a template VM's build may hold its directory: the agent aborts a build after its boot
 * timeout plus 120 s (vm-runtime.ts) and rolls it back; 300 s leaves that rollback time.
 */
export const TEMPLATE_BUILD_MAX_MS = 300_000;

/** `node/uid` of template VMs (`<stateDir>/vms/tpl-*`) whose directory is younger than a build may last. */
export async function buildingTemplates(node: SimulatedNode, now = Date.now()): Promise<string[]> {
  const vmsDir = join(node.stateDir, "vms");
  const dirs = await readdir(vmsDir, { withFileTypes: true }).catch(() => []);
  const out: string[] = [];
  for (const e of dirs) {
    if (!e.isDirectory() || !e.name.startsWith("tpl-")) continue;
    const st = await stat(join(vmsDir, e.name)).catch(() => undefined);
    const born = st === undefined ? 0 : st.birthtimeMs > 0 ? st.birthtimeMs : st.ctimeMs;
    if (now - born < TEMPLATE_BUILD_MAX_MS) out.push(`${node.nodeName}/${e.name}`);
  }
  return out;
}

/** VM directories, disks and unix sockets under `<stateDir>/vms`. */
async function files(node: SimulatedNode): Promise<NodeResource[]> {
  const vmsDir = join(node.stateDir, "vms");
  const out: NodeResource[] = [];
  let uids: string[];
  try {
    uids = (await readdir(vmsDir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
  } catch {
    return out;
  }
  for (const uid of uids) {
    const dir = join(vmsDir, uid);
    out.push({ node: node.nodeName, kind: "vm-dir", uid, detail: dir });
    const entries = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []);
    for (const e of entries) {
      const path = join(e.parentPath, e.name);
      if (e.isSocket()) out.push({ node: node.nodeName, kind: "socket", uid, detail: relative(node.stateDir, path) });
      else if (e.isFile() && e.name.endsWith(".ext4")) {
        const size = await stat(path).then((s) => s.size, () => 0);
        out.push({ node: node.nodeName, kind: "disk", uid, detail: `${relative(node.stateDir, path)} (${size} bytes)` });
      }
    }
  }
  return out;
}

interface IpLink {
  readonly ifname?: string;
  readonly ifalias?: string;
}

/** VM ports (taps or veths) in the node's network namespace: by Imp's alias, or by the tap prefix. */
async function ports(node: SimulatedNode): Promise<NodeResource[]> {
  const args = [...(node.netns === undefined ? [] : ["-n", node.netns]), "-j", "link", "show"];
  let links: IpLink[];
  try {
    links = JSON.parse((await exec("ip", args, { timeout: 10_000 })).stdout) as IpLink[];
  } catch {
    return []; // no such namespace (the node's network was never set up, or is gone with it)
  }
  const prefix = node.tapPrefix ?? "imp-";
  const out: NodeResource[] = [];
  for (const link of links) {
    const alias = /^imp-vm \S+ \S+ (\S+)$/.exec(link.ifalias ?? "");
    const named = (link.ifname ?? "").startsWith(prefix) && node.netns !== undefined;
    if (alias === null && !named) continue;
    out.push({ node: node.nodeName, kind: "tap", uid: alias?.[1], detail: `${link.ifname ?? "?"}${link.ifalias === undefined ? "" : ` (${link.ifalias})`}${node.netns === undefined ? "" : ` in netns ${node.netns}`}` });
  }
  return out;
}

/** Per-VM cgroup directories `<mount>/<cgroupParent>/<uid>`, with the pids still in them. */
async function cgroups(node: SimulatedNode): Promise<NodeResource[]> {
  const out: NodeResource[] = [];
  const seen = new Set<string>();
  for (const mount of CGROUP_MOUNTS) {
    const base = join(mount, node.cgroupParent);
    if (seen.has(base)) continue;
    seen.add(base);
    let groups: string[];
    try {
      groups = (await readdir(base, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
    } catch {
      continue;
    }
    for (const uid of groups) {
      const pids: string[] = [];
      const leaves = await readdir(join(base, uid), { withFileTypes: true }).catch(() => []);
      for (const leaf of leaves.filter((e) => e.isDirectory())) {
        const procs = await readFile(join(base, uid, leaf.name, "cgroup.procs"), "utf8").catch(() => "");
        pids.push(...procs.split(/\s+/).filter(Boolean));
      }
      out.push({ node: node.nodeName, kind: "cgroup", uid, detail: `${join(base, uid)}${pids.length === 0 ? "" : ` (pids ${pids.join(" ")})`}` });
    }
  }
  return out;
}

/** One line per resource, for an invariant's evidence. */
export function describeResources(resources: readonly NodeResource[], max = 12): string {
  const lines = resources.slice(0, max).map((r) => `${r.node} ${r.kind} ${r.uid ?? "(no owner)"}: ${r.detail}`);
  if (resources.length > max) lines.push(`… and ${resources.length - max} more`);
  return lines.join("; ");
}
