/**
 * The invariant checker of the failure-proof suite: after a fault case, observes the world (the API
 * server, the GitHub test server, every simulated node's host state) over and over and judges
 * I1–I6 (judge.ts) until each has settled: a bounded invariant (I2–I5) settles when it holds, or
 * fails when its bound after the fault passes first — but never before the checker itself has
 * watched for `minWatchMs`: a case whose own scenario (a job run through after the fault) outlasts
 * the bound on a loaded machine would otherwise be judged on its first observation, taken while
 * the agent releases the VM whose job just ended (seen: I4/I5 failed at +131 s on a VM Succeeded a
 * moment before). A leak still fails — it never clears — and `withinMs` still counts from the fault.
 * A safety invariant (I1, I6) must hold in every observation until the others have settled. One
 * observation per round serves all six.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import type { KubeConfig } from "@kubernetes/client-node";
import { LABELS, type ImpVM } from "../../src/api/index.ts";
import { createResourceClient } from "../../src/kube/index.ts";
import { IMP_VMS } from "../../src/operator/index.ts";
import type { GitHubTestServer } from "../github/server.ts";
import { JUDGES, SAFETY, type IsolationProbe, type NodeFirewall, type Observation, type VmObservation } from "./judge.ts";
import { buildingTemplates, readNodeState, type SimulatedNode } from "./node-state.ts";
import type { InvariantId, InvariantOutcome } from "./report.ts";

const exec = promisify(execFile);

export interface FaultWorld {
  readonly kubeConfig: KubeConfig;
  /** The case's namespace: its pools, VMs and Secrets. */
  readonly namespace: string;
  readonly github: GitHubTestServer;
  readonly nodes: readonly SimulatedNode[];
  /** Registrations on another forge (a real Gitea), judged with the GitHub test server's. */
  readonly forgeRunners?: () => Promise<ReadonlyArray<{ readonly id: number; readonly name: string; readonly status: string; readonly busy: boolean }>>;
}

export interface CheckOptions {
  /** Date.now() when the fault was injected; bounds and `withinMs` count from here. Default: now. */
  readonly faultAt?: number;
  /** Only GitHub requests from this time on count (a server shared by cases). Default: faultAt − 10 min. */
  readonly since?: number;
  /** Per-invariant bound in ms after the fault (defaults: DEFAULT_BOUNDS_MS). */
  readonly boundsMs?: Partial<Record<InvariantId, number>>;
  readonly intervalMs?: number;
  /** A bounded invariant is not failed before the checker has watched this long (default MIN_WATCH_MS). */
  readonly minWatchMs?: number;
  /** I6 evidence from inside a VM, made by the case; polled once per observation when given. */
  readonly probes?: () => Promise<readonly IsolationProbe[]>;
  /** Only these runners count (default: all runners of the GitHub test server). */
  readonly runnerFilter?: (name: string) => boolean;
  readonly signal?: AbortSignal;
  /** Replaces `observe` (the checker's own unit tests feed fabricated observations). */
  readonly observeWith?: () => Promise<Observation>;
}

/** Bounds after the fault. VMs boot under TCG on a loaded 2-core machine: tens of seconds each. */
export const DEFAULT_BOUNDS_MS: Readonly<Record<InvariantId, number>> = { I1: 0, I2: 300_000, I3: 120_000, I4: 120_000, I5: 120_000, I6: 0 };
/** The least the checker watches before failing a bounded invariant: an agent's release of a VM that just ended takes seconds, tens under load. */
export const MIN_WATCH_MS = 60_000;

export async function observe(world: FaultWorld, options: Pick<CheckOptions, "since" | "probes" | "runnerFilter"> = {}): Promise<Observation> {
  const vmClient = createResourceClient<ImpVM>(world.kubeConfig, IMP_VMS);
  const [vmList, nodeResources, templates, firewalls, probes, forgeRunners] = await Promise.all([
    vmClient.list({ namespace: world.namespace }),
    Promise.all(world.nodes.map((n) => readNodeState(n))).then((lists) => lists.flat()),
    Promise.all(world.nodes.map((n) => buildingTemplates(n))).then((lists) => lists.flat()),
    Promise.all(world.nodes.map((n) => readFirewall(n))),
    options.probes?.(),
    world.forgeRunners?.() ?? Promise.resolve([]),
  ]);
  const since = options.since ?? 0;
  const sessions = world.github.requests.filter((r) => r.at >= since && r.method === "POST" && r.path === "/_imp-test/runner/sessions");
  const keep = options.runnerFilter ?? (() => true);
  return {
    at: Date.now(),
    vms: vmList.items.map(vmObservation),
    github: {
      runners: [...[...world.github.runners.values()].map((r) => ({ id: r.id, name: r.name, status: r.status, busy: r.busy })), ...forgeRunners.map((r) => ({ id: r.id, name: r.name, status: r.status === "online" ? ("online" as const) : ("offline" as const), busy: r.busy }))].filter((r) => keep(r.name)),
      sessionRefusals: sessions.filter((r) => r.status === 409).length,
      staleSetups: sessions.filter((r) => r.status === 401).length,
    },
    nodeResources,
    buildingTemplates: templates,
    firewalls,
    ...(probes === undefined ? {} : { probes }),
  };
}

function vmObservation(vm: ImpVM): VmObservation {
  return {
    name: vm.metadata.name ?? "",
    uid: vm.metadata.uid ?? "",
    phase: vm.status?.phase,
    // Deleting but still held by a finalizer: it still exists, and it is not live.
    deleting: vm.metadata.deletionTimestamp !== undefined,
    nodeName: vm.status?.nodeName,
    pool: vm.metadata.labels?.[LABELS.pool],
    setupState: vm.status?.setup?.state,
    sealed: [...(vm.status?.setup?.sealed === undefined ? [] : ["setup" as const]), ...(vm.status?.inputs === undefined ? [] : ["inputs" as const])],
  };
}

/** The node's VM firewall as nft prints it; a node without a network namespace has no VM network here. */
export async function readFirewall(node: SimulatedNode): Promise<NodeFirewall> {
  if (node.netns === undefined) return { node: node.nodeName, noNetwork: true, ruleset: "" };
  try {
    const { stdout } = await exec("ip", ["netns", "exec", node.netns, "nft", "list", "ruleset"], { timeout: 10_000 });
    // No Imp table at all: the agent runs without a VM network (VMs get no NIC).
    return { node: node.nodeName, noNetwork: !/@blocked_v4|blocked_v4/.test(stdout), ruleset: stdout };
  } catch {
    return { node: node.nodeName, noNetwork: true, ruleset: "" };
  }
}

const secs = (ms: number): string => `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

/**
 * Observes until every invariant settled (see the file comment), then returns one outcome per
 * invariant, I1 to I6, with the evidence of the deciding observation.
 */
export async function checkInvariants(world: FaultWorld, options: CheckOptions = {}): Promise<InvariantOutcome[]> {
  const faultAt = options.faultAt ?? Date.now();
  const bounds = { ...DEFAULT_BOUNDS_MS, ...options.boundsMs };
  const interval = options.intervalMs ?? 500;
  const minWatch = options.minWatchMs ?? MIN_WATCH_MS;
  let watchFrom: number | undefined;
  const ids = Object.keys(JUDGES) as InvariantId[];
  const settled = new Map<InvariantId, InvariantOutcome>();
  const safetyBroken = new Map<InvariantId, InvariantOutcome>();
  const lastSafe = new Map<InvariantId, string>();
  const observeOptions = { since: options.since ?? faultAt - 600_000, ...(options.probes === undefined ? {} : { probes: options.probes }), ...(options.runnerFilter === undefined ? {} : { runnerFilter: options.runnerFilter }) };
  for (;;) {
    const o = await (options.observeWith ?? (() => observe(world, observeOptions)))();
    watchFrom ??= o.at;
    for (const id of ids) {
      const { held, detail } = JUDGES[id](o);
      if (SAFETY.has(id)) {
        if (!held && !safetyBroken.has(id)) safetyBroken.set(id, { id, held: false, detail: `at +${o.at - faultAt} ms: ${detail}` });
        else if (held) lastSafe.set(id, detail);
        continue;
      }
      if (settled.has(id)) continue;
      if (held) settled.set(id, { id, held: true, detail, withinMs: Math.max(0, o.at - faultAt) });
      else if (o.at - faultAt >= bounds[id] && o.at - watchFrom >= minWatch) settled.set(id, { id, held: false, detail: `still not holding ${secs(o.at - faultAt)} after the fault (bound ${secs(bounds[id])}): ${detail}` });
    }
    const bounded = ids.filter((id) => !SAFETY.has(id));
    if (bounded.every((id) => settled.has(id)) || options.signal?.aborted === true) break;
    await sleep(interval, options.signal);
  }
  return ids.map((id) => {
    if (SAFETY.has(id)) return safetyBroken.get(id) ?? { id, held: true, detail: lastSafe.get(id) ?? "held in every observation" };
    return settled.get(id) ?? { id, held: false, detail: "the check was aborted before this invariant settled" };
  });
}

/** For a case that wants I5 for one VM only, e.g. right after it was released. */
export async function leftoversOf(world: FaultWorld, uid: string): Promise<Awaited<ReturnType<typeof readNodeState>>> {
  return (await Promise.all(world.nodes.map((n) => readNodeState(n, { uid })))).flat();
}
