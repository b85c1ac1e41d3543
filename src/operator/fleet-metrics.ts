/**
 * The operator's gauges of the fleet's state, read at scrape time from what the process already
 * holds (no bookkeeping of their own to drift): whether this replica leads, how long the oldest
 * deleting VM of each node has waited, whether each scale-set pool's listener holds a session, and
 * how many of each pool's VMs wait for node capacity (demand the cluster cannot place now), and how
 * many jobs each scale-set pool leaves on GitHub for the same reason.
 * They are what the alert rules (deploy/helm/imp/files/alerts.yaml) ask about beyond ARC's gauges.
 */
import { Gauge, type Registry } from "prom-client";
import type { Clock } from "../shared/index.ts";
import { LABELS } from "../api/index.ts";
import { waitsForCapacity } from "./pools/index.ts";

export const FLEET_METRICS = {
  leader: "imp_operator_leader",
  deletingAge: "imp_operator_vm_deleting_max_age_seconds",
  scaleSetSession: "imp_operator_scale_set_session",
  waitingForCapacity: "imp_operator_pool_vms_waiting_for_capacity",
  jobsWaitingForCapacity: "imp_operator_pool_jobs_waiting_for_capacity",
} as const;

export interface FleetMetricsSources {
  readonly registry: Registry;
  readonly clock: Clock;
  readonly isLeader: () => boolean;
  /** The VM cache (when each VM's deletion began, where it is bound, its pool, phase and Scheduled condition are read). */
  readonly vmCache: { list(): ReadonlyArray<Parameters<typeof waitsForCapacity>[0] & { readonly metadata: { readonly namespace?: string | undefined; readonly labels?: Readonly<Record<string, string>> | undefined; readonly ownerReferences?: ReadonlyArray<{ readonly kind: string; readonly name: string }> | undefined } }> };
  /** Each scale-set pool (`namespace/name`) with a listener on this replica, and whether it hears its jobs now. */
  readonly scaleSetSessions: () => Iterable<readonly [poolKey: string, held: boolean]>;
  /** Each scale-set pool with a listener here, and the jobs GitHub holds for it for want of node capacity. */
  readonly scaleSetJobsWaiting: () => Iterable<readonly [poolKey: string, jobs: number]>;
}

/** Registers the gauges (again after a restart of the operator in the same process: old ones go first). */
export function registerFleetMetrics(s: FleetMetricsSources): void {
  const registers = [s.registry];
  for (const name of Object.values(FLEET_METRICS)) s.registry.removeSingleMetric(name);
  new Gauge({
    name: FLEET_METRICS.leader,
    help: "1 while this operator replica leads (its controllers run), else 0; max() over replicas below 1 means no leader.",
    registers,
    collect() {
      this.set(s.isLeader() ? 1 : 0);
    },
  });
  new Gauge({
    name: FLEET_METRICS.deletingAge,
    help: "Per node, how long the oldest ImpVM being deleted there has waited (seconds since its deletionTimestamp); a VM stuck terminating keeps it growing. node is empty for VMs never bound.",
    labelNames: ["node"],
    registers,
    collect() {
      this.reset();
      const now = s.clock.now();
      const oldest = new Map<string, number>();
      for (const vm of s.vmCache.list()) {
        const since = vm.metadata.deletionTimestamp === undefined ? NaN : Date.parse(vm.metadata.deletionTimestamp);
        if (Number.isNaN(since)) continue;
        const node = vm.status?.nodeName ?? "";
        oldest.set(node, Math.max(oldest.get(node) ?? 0, Math.max(0, (now - since) / 1000)));
      }
      for (const [node, age] of oldest) this.set({ node }, age);
    },
  });
  new Gauge({
    name: FLEET_METRICS.scaleSetSession,
    help: "Per scale-set pool, on the leader: 1 while its listener hears its jobs (a message session held, its last poll a success: condition ScaleSetListening reason Listening), 0 otherwise (starting, a session lost and being reopened, polls failing).",
    labelNames: ["namespace", "name"],
    registers,
    collect() {
      this.reset();
      for (const [key, held] of s.scaleSetSessions()) {
        const [namespace = "", name = ""] = key.split("/");
        this.set({ namespace, name }, held ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: FLEET_METRICS.jobsWaitingForCapacity,
    help: "Per scale-set pool, on the leader: jobs waiting on GitHub beyond the capacity the pool's listener told it (below maxConcurrent because the cluster has no room for more of its VMs): jobs the pool leaves on GitHub for want of nodes. 0 while the pool is not short of nodes.",
    labelNames: ["namespace", "pool"],
    registers,
    collect() {
      this.reset();
      if (!s.isLeader()) return;
      for (const [key, jobs] of s.scaleSetJobsWaiting()) {
        const [namespace = "", pool = ""] = key.split("/");
        this.set({ namespace, pool }, jobs);
      }
    },
  });
  new Gauge({
    name: FLEET_METRICS.waitingForCapacity,
    help: "Per pool, on the leader: its runner VMs that wait to be placed while the scheduler finds no node with room for them (Scheduled=False, Unschedulable): jobs the cluster cannot take now. Pools with none have no series.",
    labelNames: ["namespace", "pool"],
    registers,
    collect() {
      this.reset();
      // The leader's count only: every replica holds the caches, and a sum over replicas would double it.
      if (!s.isLeader()) return;
      const waiting = new Map<string, number>();
      for (const vm of s.vmCache.list()) {
        const pool = vm.metadata.labels?.[LABELS.pool];
        // Owned by a pool of that name, as the pool's own decision counts its VMs.
        const owned = vm.metadata.ownerReferences?.some((o) => o.kind === "ImpVMRunnerPool" && o.name === pool) === true;
        if (pool === undefined || !owned || !waitsForCapacity(vm)) continue;
        const key = `${vm.metadata.namespace ?? ""}/${pool}`;
        waiting.set(key, (waiting.get(key) ?? 0) + 1);
      }
      for (const [key, n] of waiting) {
        const [namespace = "", pool = ""] = key.split("/");
        this.set({ namespace, pool }, n);
      }
    },
  });
}
