/**
 * Imp's own histograms for the VM part of a job's timeline, from ImpVM status as the VM cache
 * sees it change: one observation per VM and step (vm-points.ts), when both ends of the step are
 * known. Steps that ended before this process started are not observed, so an operator restart
 * (whose cache replays every VM) does not count old VMs again.
 */
import { Histogram, type Registry } from "prom-client";
import { LABELS, type ImpVM } from "../../api/index.ts";
import type { DeepReadonly } from "../../kube/index.ts";
import { vmPoints, vmSteps, type VmStep } from "./vm-points.ts";

export const IMP_JOB_METRICS = {
  step: "imp_job_step_duration_seconds",
  runnerReady: "imp_job_runner_ready_seconds",
} as const;

/** Finer than ARC's below a second, where Imp's steps are. */
export const IMP_STEP_BUCKETS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300, 600];

const MAX_TRACKED_VMS = 10_000;

type AnyVM = Readonly<ImpVM> | DeepReadonly<ImpVM>;

export class VmStepMetrics {
  readonly #step: Histogram;
  readonly #ready: Histogram;
  readonly #sinceMs: number;
  /** uid → steps observed (and "ready"), oldest VM first. */
  readonly #observed = new Map<string, Set<VmStep | "ready">>();

  /** Steps that ended before `sinceMs` are never observed. */
  constructor(registry: Registry, sinceMs: number) {
    this.#sinceMs = sinceMs;
    this.#step = new Histogram({
      name: IMP_JOB_METRICS.step,
      help: "Seconds each step of a runner VM took, by the point it ends at: vm_bound (from VM created), setup_minted and disk_ready (from bound), booted (from disk ready), setup_delivered (from booted and minted), cleaned (from the VM finishing).",
      labelNames: ["namespace", "pool", "step"],
      buckets: [...IMP_STEP_BUCKETS],
      registers: [registry],
    });
    this.#ready = new Histogram({
      name: IMP_JOB_METRICS.runnerReady,
      help: "Seconds from a runner VM being created to its runner having its setup (online, able to take a job): the cold-start cost.",
      labelNames: ["namespace", "pool"],
      buckets: [...IMP_STEP_BUCKETS],
      registers: [registry],
    });
  }

  observe(vm: AnyVM): void {
    const uid = vm.metadata.uid;
    const pool = vm.metadata.labels?.[LABELS.pool];
    if (uid === undefined || pool === undefined) return;
    const labels = { namespace: vm.metadata.namespace ?? "", pool };
    const points = vmPoints(vm);
    let seen = this.#observed.get(uid);
    const mark = (what: VmStep | "ready"): boolean => {
      if (seen?.has(what) === true) return false;
      if (seen === undefined) {
        seen = new Set();
        this.#observed.set(uid, seen);
        if (this.#observed.size > MAX_TRACKED_VMS) this.#observed.delete(this.#observed.keys().next().value ?? "");
      }
      seen.add(what);
      return true;
    };
    for (const s of vmSteps(points)) {
      if (s.endsAt >= this.#sinceMs && mark(s.step)) this.#step.observe({ ...labels, step: s.step }, s.ms / 1000);
    }
    const { vm_created: created, setup_delivered: online } = points;
    if (created !== undefined && online !== undefined && online >= this.#sinceMs && mark("ready")) this.#ready.observe(labels, Math.max(0, online - created) / 1000);
  }

  forget(uid: string | undefined): void {
    if (uid !== undefined) this.#observed.delete(uid);
  }
}
