import { statfs } from "node:fs/promises";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { VM_PHASES, VM_REASONS } from "../../api/index.ts";
import type { RuntimeEvent } from "../vm/index.ts";

const SECONDS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300];
const RUN_SECONDS = [1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600];

/** The node agent's Prometheus metrics. Names are `imp_agent_*`; durations in seconds. */
export class AgentMetrics {
  readonly prepare: Histogram;
  readonly boot: Histogram<"vmm">;
  readonly run: Histogram;
  readonly vms: Gauge<"phase">;
  readonly setupDeliveries: Counter;
  readonly errors: Counter<"code">;
  readonly ended: Counter<"reason" | "pool">;
  readonly sweepRemoved: Counter<"kind">;
  readonly exitDetection: Histogram;
  readonly snapshots: Counter<"result">;
  readonly snapshotCreate: Histogram;
  readonly cache: Counter<"result">;

  /** `stateDir`: the node's state directory, whose filesystem's size and free space are read at each scrape. */
  constructor(registry: Registry, stateDir?: string) {
    const registers = [registry];
    this.prepare = new Histogram({ name: "imp_agent_prepare_seconds", help: "Preparing → VMM starting (image and disks).", buckets: SECONDS, registers });
    this.boot = new Histogram({ name: "imp_agent_boot_seconds", help: "VMM start → guest agent hello.", labelNames: ["vmm"], buckets: SECONDS, registers });
    this.run = new Histogram({ name: "imp_agent_run_seconds", help: "Workload started → VM ended.", buckets: RUN_SECONDS, registers });
    this.vms = new Gauge({ name: "imp_agent_vms", help: "VMs this agent holds, by API phase.", labelNames: ["phase"], registers });
    for (const phase of VM_PHASES) this.vms.set({ phase }, 0);
    this.setupDeliveries = new Counter({ name: "imp_agent_setup_deliveries_total", help: "One-time runner setups the guest confirmed.", registers });
    this.errors = new Counter({ name: "imp_agent_errors_total", help: "Failures by error code.", labelNames: ["code"], registers });
    this.ended = new Counter({ name: "imp_agent_vms_ended_total", help: "VMs that ended, by reason (OOMKilled: the VM's memory limit was reached) and runner pool (empty for VMs of no pool).", labelNames: ["reason", "pool"], registers });
    this.sweepRemoved = new Counter({ name: "imp_agent_sweep_removed_total", help: "Leftovers the sweep removed, by kind (process, socket, tap, cgroup, disk, dir, snapshot).", labelNames: ["kind"], registers });
    this.exitDetection = new Histogram({ name: "imp_agent_exit_detection_seconds", help: "VMM exit → agent knew of it.", buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5], registers });
    this.snapshots = new Counter({ name: "imp_agent_memory_snapshot_events_total", help: "VMs of startFrom: Snapshot classes restored or booted instead (fallback: no snapshot yet, or it failed to restore), and templates created or failed.", labelNames: ["result"], registers });
    for (const result of ["restored", "fallback", "created", "build-failed", "build-deferred"]) this.snapshots.inc({ result }, 0);
    this.snapshotCreate = new Histogram({ name: "imp_agent_memory_snapshot_create_seconds", help: "A template VM's boot, save and digests, for one memory snapshot.", buckets: SECONDS, registers });
    this.cache = new Counter({ name: "imp_agent_cache_clone_events_total", help: "Cache volume clones: attached to a VM, not attached (unsupported: the VMM takes no clone; failed: it could not be made — the job ran cold), and after the VM promoted or discarded.", labelNames: ["result"], registers });
    for (const result of ["attached", "unsupported", "failed", "promoted", "discarded"]) this.cache.inc({ result }, 0);
    if (stateDir !== undefined) {
      // Read at scrape time, as node_exporter's filesystem gauges are: VM disks, the image cache and
      // snapshots all live there, and a full one fails every VM of the node.
      const fs = async (): Promise<{ size: number; free: number } | undefined> => {
        const st = await statfs(stateDir).catch(() => undefined);
        return st === undefined ? undefined : { size: st.blocks * st.bsize, free: st.bavail * st.bsize };
      };
      // Labeled by path so that an unreadable directory has no series at all, not a 0 that reads as full.
      const labelNames = ["path"] as const;
      new Gauge({ name: "imp_agent_state_dir_size_bytes", help: "Size of the filesystem holding the agent's state directory.", labelNames, registers, async collect() { this.reset(); const f = await fs(); if (f !== undefined) this.set({ path: stateDir }, f.size); } });
      new Gauge({ name: "imp_agent_state_dir_free_bytes", help: "Space left for the agent on the filesystem holding its state directory (what an unprivileged writer may use).", labelNames, registers, async collect() { this.reset(); const f = await fs(); if (f !== undefined) this.set({ path: stateDir }, f.free); } });
    }
  }

  /** Pools whose ended-VM series exist (at 0 for every reason) on this agent. */
  readonly #pools = new Set<string>();

  /** `pool`: the runner pool of the VM an event is about ("" for none). */
  onRuntimeEvent(event: RuntimeEvent, pool = ""): void {
    // Every reason's series from the pool's first VM on, at 0: increase() counts nothing for a series
    // whose first sample is already 1, so a node whose first boots fail would otherwise look healthy.
    if (!this.#pools.has(pool)) {
      this.#pools.add(pool);
      for (const reason of Object.values(VM_REASONS)) this.ended.inc({ reason, pool }, 0);
    }
    switch (event.kind) {
      case "prepared":
        this.prepare.observe(event.ms / 1000);
        break;
      case "booted":
        this.boot.observe({ vmm: event.vmm }, event.ms / 1000);
        break;
      case "setup-delivered":
        this.setupDeliveries.inc();
        break;
      case "ended":
        this.ended.inc({ reason: event.outcome.reason, pool });
        if (event.runMs !== undefined) this.run.observe(event.runMs / 1000);
        break;
      case "failed":
        this.errors.inc({ code: event.code });
        break;
      case "cache":
        this.cache.inc({ result: event.result });
        break;
      case "snapshot":
        this.snapshots.inc({ result: event.result });
        if (event.result === "created" && event.ms !== undefined) this.snapshotCreate.observe(event.ms / 1000);
        break;
    }
  }
}
