/**
 * The operator's gauges of the fleet's state, read at scrape time from what the process already
 * holds (no bookkeeping of their own to drift): whether this replica leads, how long the oldest
 * deleting VM of each node has waited, and whether each scale-set pool's listener holds a session.
 * They are what the alert rules (deploy/helm/imp/files/alerts.yaml) ask about beyond ARC's gauges.
 */
import { Gauge, type Registry } from "prom-client";
import type { Clock } from "../shared/index.ts";

export const FLEET_METRICS = {
  leader: "imp_operator_leader",
  deletingAge: "imp_operator_vm_deleting_max_age_seconds",
  scaleSetSession: "imp_operator_scale_set_session",
} as const;

export interface FleetMetricsSources {
  readonly registry: Registry;
  readonly clock: Clock;
  readonly isLeader: () => boolean;
  /** The VM cache (only when each VM's deletion began and where it is bound are read). */
  readonly vmCache: { list(): ReadonlyArray<{ readonly metadata: { readonly deletionTimestamp?: string | undefined }; readonly status?: { readonly nodeName?: string | undefined } | undefined }> };
  /** Each scale-set pool (`namespace/name`) with a listener on this replica, and whether it hears its jobs now. */
  readonly scaleSetSessions: () => Iterable<readonly [poolKey: string, held: boolean]>;
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
}
