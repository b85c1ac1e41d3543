/**
 * Pure: the points of a runner VM's life as its ImpVM status records them (ms since the epoch),
 * and the steps between them. The timeline (timeline.ts) and Imp's per-step histograms
 * (step-metrics.ts) read the same points, so what the demo prints is what Prometheus counts.
 *
 * The steps tile the cold path: created → bound → disk ready → booted → setup delivered, with
 * the mint beside the disk work (it starts at binding and delivery waits for both), and
 * finished → cleaned after the job.
 */
import { CONDITION_TYPES, type ImpVM } from "../../api/index.ts";
import type { DeepReadonly } from "../../kube/index.ts";

export const VM_POINTS = ["vm_created", "vm_bound", "setup_minted", "disk_ready", "booted", "setup_delivered", "vm_finished", "cleaned"] as const;
export type VmPoint = (typeof VM_POINTS)[number];
export type VmPoints = Partial<Record<VmPoint, number>>;

/** Each step is named by the point it ends at. */
export const VM_STEPS = ["vm_bound", "setup_minted", "disk_ready", "booted", "setup_delivered", "cleaned"] as const;
export type VmStep = (typeof VM_STEPS)[number];

type AnyVM = Readonly<ImpVM> | DeepReadonly<ImpVM>;

const time = (iso: string | undefined): number | undefined => {
  if (iso === undefined) return undefined;
  const ms = Date.parse(iso);
  return Number.isFinite(ms) ? ms : undefined;
};

const plus = (at: number | undefined, ms: number | undefined): number | undefined => (at === undefined || ms === undefined ? undefined : at + ms);

export function vmPoints(vm: AnyVM): VmPoints {
  const s = vm.status ?? {};
  const ts = s.phaseTimestamps ?? {};
  const preparing = time(ts.preparing);
  const booting = time(ts.booting);
  // A VM minted before status.setup.mintedAt existed still has the SetupReady condition's transition time.
  const setupReady = (s.conditions ?? []).find((c) => c.type === CONDITION_TYPES.vm.SetupReady && c.status === "True");
  const points: Record<VmPoint, number | undefined> = {
    vm_created: time(ts.pending) ?? time(vm.metadata.creationTimestamp),
    vm_bound: time(ts.scheduled),
    setup_minted: time(s.setup?.mintedAt) ?? time(setupReady?.lastTransitionTime),
    disk_ready: plus(preparing, s.prepareDurationMs) ?? booting,
    booted: plus(booting, s.bootDurationMs),
    // A VM without a runner setup has nothing to deliver: its workload starting is the same point.
    setup_delivered: time(s.setup?.deliveredAt) ?? (s.setup === undefined ? time(ts.running) : undefined),
    vm_finished: time(ts.succeeded) ?? time(ts.failed),
    cleaned: time(s.teardown?.completedAt),
  };
  return Object.fromEntries(Object.entries(points).filter(([, v]) => v !== undefined)) as VmPoints;
}

const latest = (...xs: Array<number | undefined>): number | undefined => (xs.some((x) => x === undefined) ? undefined : Math.max(...(xs as number[])));

/** Where each step starts. */
export function stepStart(step: VmStep, p: VmPoints): number | undefined {
  switch (step) {
    case "vm_bound":
      return p.vm_created;
    case "setup_minted":
    case "disk_ready":
      return p.vm_bound;
    case "booted":
      return p.disk_ready;
    case "setup_delivered":
      // Delivery needs the guest up and the setup minted; whichever came last starts the step.
      return p.setup_minted === undefined ? p.booted : latest(p.booted, p.setup_minted);
    case "cleaned":
      return p.vm_finished;
  }
}

/** The steps both of whose ends are known, in ms (never negative: hosts' clocks may differ a little). */
export function vmSteps(p: VmPoints): Array<{ readonly step: VmStep; readonly ms: number; readonly endsAt: number }> {
  const out: Array<{ step: VmStep; ms: number; endsAt: number }> = [];
  for (const step of VM_STEPS) {
    const from = stepStart(step, p);
    const to = p[step];
    if (from !== undefined && to !== undefined) out.push({ step, ms: Math.max(0, to - from), endsAt: to });
  }
  return out;
}
