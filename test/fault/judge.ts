/**
 * The invariants I1–I6 (report.ts INVARIANTS) as pure judgments of one observation of the world:
 * the ImpVMs of the case's namespace (with the sealed material their status holds), the GitHub test server's runners and
 * session log, and each node's host state. No I/O here; invariants.ts observes and polls, and
 * judge.test.ts proves each judgment can fail.
 *
 * Safety invariants (I1, I6) must hold in every observation; bounded ones (I2–I5) must come to
 * hold within their bound after the fault.
 */
import type { InvariantId } from "./report.ts";
import { describeResources, type NodeResource } from "./node-state.ts";

export const TERMINAL_PHASES: ReadonlySet<string> = new Set(["Succeeded", "Failed"]);

export interface VmObservation {
  readonly name: string;
  readonly uid: string;
  readonly phase: string | undefined;
  readonly deleting: boolean;
  readonly nodeName: string | undefined;
  /** The imp.dev/pool label: a runner VM. */
  readonly pool: string | undefined;
  readonly setupState: string | undefined;
  /** Sealed material the VM's status still holds: its one-time setup, its Secret inputs. */
  readonly sealed: readonly ("setup" | "inputs")[];
}

export interface RunnerObservation {
  readonly id: number;
  readonly name: string;
  readonly status: "online" | "offline";
  readonly busy: boolean;
}

export interface GitHubObservation {
  readonly runners: readonly RunnerObservation[];
  /** Runner sessions refused since the case began: 409 = a setup used a second time or a second session. */
  readonly sessionRefusals: number;
  /** Sessions refused with 401 (a setup whose runner no longer exists): not a double use, shown as evidence. */
  readonly staleSetups: number;
}

export interface IsolationProbe {
  /** What was tried from inside a VM, e.g. "node 10.0.0.1:10250", "kube-apiserver", "169.254.169.254:80". */
  readonly target: string;
  readonly reached: boolean;
}

export interface NodeFirewall {
  readonly node: string;
  /** The node has no VM network (VMs get no NIC at all). */
  readonly noNetwork: boolean;
  /** The node's nftables ruleset as `nft list ruleset` prints it, when it has a network. */
  readonly ruleset: string;
}

export interface Observation {
  /** Date.now() of the observation. */
  readonly at: number;
  readonly vms: readonly VmObservation[];
  readonly github: GitHubObservation;
  /** Host state of every node, each resource tagged with its node. */
  readonly nodeResources: readonly NodeResource[];
  readonly firewalls: readonly NodeFirewall[];
  /** Probes a case made from inside a VM (I6), when it made any. */
  readonly probes?: readonly IsolationProbe[];
  /**
   * `node/uid` of memory-snapshot template VMs the node's agent may still be building (their
   * directory younger than a build may last): the agent's own VMs, not ImpVMs. An older one is a leak.
   */
  readonly buildingTemplates?: readonly string[];
}

export interface Judgment {
  readonly held: boolean;
  readonly detail: string;
}

const VMM_COMM = /^(qemu|firecracker)/;

/** A VM that may still own node resources, a runner registration and a setup Secret. */
export function isLive(vm: VmObservation): boolean {
  return !vm.deleting && !TERMINAL_PHASES.has(vm.phase ?? "");
}

/** I1: no setup used twice (a refused second session), no runner name registered twice, no VM with two VMMs. */
export function judgeI1(o: Observation): Judgment {
  const problems: string[] = [];
  if (o.github.sessionRefusals > 0) problems.push(`${o.github.sessionRefusals} runner session(s) refused with 409: a one-time setup reached a second process`);
  const byName = new Map<string, number>();
  for (const r of o.github.runners) byName.set(r.name, (byName.get(r.name) ?? 0) + 1);
  const twice = [...byName].filter(([, n]) => n > 1).map(([name, n]) => `${name} ×${n}`);
  if (twice.length > 0) problems.push(`runner name(s) registered more than once: ${twice.join(", ")}`);
  const vmms = new Map<string, string[]>();
  for (const r of o.nodeResources) {
    if (r.kind !== "process" || r.uid === undefined) continue;
    const comm = /^pid \d+ (\S+):/.exec(r.detail)?.[1] ?? "";
    if (!VMM_COMM.test(comm)) continue;
    vmms.set(r.uid, [...(vmms.get(r.uid) ?? []), `${r.node} ${r.detail.slice(0, 40)}`]);
  }
  const doubled = [...vmms].filter(([, list]) => list.length > 1).map(([uid, list]) => `${uid}: ${list.join(" | ")}`);
  if (doubled.length > 0) problems.push(`VM(s) with more than one VMM process: ${doubled.join("; ")}`);
  if (problems.length > 0) return { held: false, detail: problems.join("; ") };
  const stale = o.github.staleSetups > 0 ? `; ${o.github.staleSetups} session(s) with a setup of a removed runner refused (401)` : "";
  return { held: true, detail: `${o.github.runners.length} registration(s), names unique; no setup used twice; at most one VMM per VM${stale}` };
}

/** A runner VM is healthy while Running only if its runner is online on GitHub (or busy with a job). */
function runningHealthy(vm: VmObservation, runners: ReadonlyMap<string, RunnerObservation>): boolean {
  if (vm.phase !== "Running" || vm.deleting) return false;
  if (vm.pool === undefined) return true;
  const r = runners.get(vm.name);
  return r !== undefined && (r.status === "online" || r.busy);
}

/** I2: every VM is terminal, deleted, or Running as it should (a runner VM: its runner online). */
export function judgeI2(o: Observation): Judgment {
  const runners = new Map(o.github.runners.map((r) => [r.name, r]));
  const stuck = o.vms.filter((vm) => !TERMINAL_PHASES.has(vm.phase ?? "") && !runningHealthy(vm, runners));
  if (stuck.length > 0) return { held: false, detail: `not terminal and not running healthily: ${stuck.map((vm) => `${vm.name} ${vm.phase ?? "Pending"}${vm.deleting ? " (deleting)" : ""}${vm.phase === "Running" && vm.pool !== undefined ? " (runner not online)" : ""}`).join(", ")}` };
  const terminal = o.vms.filter((vm) => TERMINAL_PHASES.has(vm.phase ?? "")).length;
  return { held: true, detail: `${o.vms.length} VM(s): ${terminal} terminal, ${o.vms.length - terminal} running with their runner online` };
}

/** I3: every registration belongs to a live VM (an ended, deleting or vanished VM has none left). */
export function judgeI3(o: Observation): Judgment {
  const live = new Set(o.vms.filter(isLive).map((vm) => vm.name));
  const left = o.github.runners.filter((r) => !live.has(r.name));
  if (left.length > 0) return { held: false, detail: `registration(s) of no live VM: ${left.map((r) => `${r.name} (id ${r.id}, ${r.status}${r.busy ? ", busy" : ""})`).join(", ")}` };
  return { held: true, detail: `${o.github.runners.length} registration(s), each of a live VM` };
}

/** I4: nothing sealed (setup, Secret inputs) outlives its VM's run: only a live VM's status holds any. */
export function judgeI4(o: Observation): Judgment {
  const holding = o.vms.filter((vm) => vm.sealed.length > 0);
  const left = holding.filter((vm) => !isLive(vm));
  if (left.length > 0) return { held: false, detail: `sealed material outliving its VM's run: ${left.map((vm) => `${vm.name} (VM ${vm.phase ?? "Pending"}${vm.deleting ? ", deleting" : ""}: ${vm.sealed.join(", ")})`).join(", ")}` };
  return { held: true, detail: `${holding.length} VM(s) hold sealed material, each live` };
}

/** I5: every process, socket, tap, cgroup, disk and VM dir on a node belongs to a live VM bound to that node, or to a template VM its agent is building. */
export function judgeI5(o: Observation): Judgment {
  const liveOn = new Set([...o.vms.filter((vm) => isLive(vm) && vm.nodeName !== undefined).map((vm) => `${vm.nodeName ?? ""}/${vm.uid}`), ...(o.buildingTemplates ?? [])]);
  const left = o.nodeResources.filter((r) => r.uid === undefined || !liveOn.has(`${r.node}/${r.uid}`));
  if (left.length > 0) return { held: false, detail: `${left.length} node resource(s) of no live VM: ${describeResources(left)}` };
  const kinds = new Map<string, number>();
  for (const r of o.nodeResources) kinds.set(r.kind, (kinds.get(r.kind) ?? 0) + 1);
  const summary = [...kinds].map(([k, n]) => `${n} ${k}`).join(", ");
  return { held: true, detail: `everything on the nodes belongs to a live VM${summary === "" ? " (nothing left)" : ` (${summary})`}` };
}

/** What every node firewall must drop from VMs: link-local (cloud metadata) and the node's loopback. */
export const REQUIRED_BLOCKS = ["169.254.0.0/16", "127.0.0.0/8"] as const;
/** What it must refuse unless allowed: egress `internet` is public unicast (private and shared blocks at least). */
export const REQUIRED_REFUSALS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"] as const;

/** I6: no probe from a VM reached a forbidden target; every node with a VM network drops the required blocks. */
export function judgeI6(o: Observation): Judgment {
  const reached = (o.probes ?? []).filter((p) => p.reached);
  if (reached.length > 0) return { held: false, detail: `a VM reached: ${reached.map((p) => p.target).join(", ")}` };
  const weak: string[] = [];
  for (const fw of o.firewalls) {
    if (fw.noNetwork) continue;
    const missing: string[] = [...REQUIRED_BLOCKS, ...REQUIRED_REFUSALS].filter((b) => !fw.ruleset.includes(b));
    if (!/ip daddr @blocked_v4 drop/.test(fw.ruleset)) missing.push("the drop rule for @blocked_v4");
    if (!/ip daddr @refused_v4 jump refused/.test(fw.ruleset) || !/chain refused \{[^}]*\bdrop\s*\}/.test(fw.ruleset)) missing.push("the refusal of @refused_v4 (a jump to a chain ending in drop)");
    if (missing.length > 0) weak.push(`${fw.node} lacks ${missing.join(", ")}`);
  }
  if (weak.length > 0) return { held: false, detail: `VM firewall incomplete: ${weak.join("; ")}` };
  const probes = o.probes === undefined ? "no probe from a VM in this case" : `${o.probes.length} probe(s) from a VM, none reached (${o.probes.map((p) => p.target).join(", ")})`;
  const nets = o.firewalls.map((fw) => `${fw.node}: ${fw.noNetwork ? "no VM network (no NIC)" : "blocks link-local and loopback, refuses non-public ranges"}`).join(", ");
  return { held: true, detail: `${probes}; ${nets}` };
}

export const JUDGES: Readonly<Record<InvariantId, (o: Observation) => Judgment>> = { I1: judgeI1, I2: judgeI2, I3: judgeI3, I4: judgeI4, I5: judgeI5, I6: judgeI6 };

/** Safety invariants hold in every observation; the others must come to hold within a bound. */
export const SAFETY: ReadonlySet<InvariantId> = new Set(["I1", "I6"]);
