/**
 * Pure: one CI job's timeline — queued → VM bound → setup minted → disk ready → booted → setup
 * delivered → job started → job finished → cleaned → replacement online — from its ImpVM, the
 * GitHub job's times and the VM that replaced it. The demo and the startup benchmark print it.
 *
 * Points come out in the order they happened, with the time since the previous one, so a warm
 * start (the runner was online before the job was queued) reads as it happened instead of as
 * negative steps; `sinceQueuedMs` says how far each point is from the job being queued.
 */
import { LABELS, type ImpVM } from "../../api/index.ts";
import type { Cached, Stored } from "../../kube/index.ts";
import { vmPoints } from "./vm-points.ts";

export const TIMELINE_POINTS = [
  "queued",
  "vm_created",
  "vm_bound",
  "setup_minted",
  "disk_ready",
  "booted",
  "setup_delivered",
  "job_started",
  "job_finished",
  "cleaned",
  "replacement_online",
] as const;
export type TimelinePointName = (typeof TIMELINE_POINTS)[number];

export const TIMELINE_LABELS: Readonly<Record<TimelinePointName, string>> = {
  queued: "queued",
  vm_created: "VM created",
  vm_bound: "VM bound",
  setup_minted: "setup minted",
  disk_ready: "disk ready",
  booted: "booted",
  setup_delivered: "setup delivered",
  job_started: "job started",
  job_finished: "job finished",
  cleaned: "cleaned",
  replacement_online: "replacement online",
};

/** The GitHub job: ISO strings as in its webhook or REST answer, or ms since the epoch. */
export interface JobTimes {
  readonly queuedAt?: string | number | undefined;
  readonly startedAt?: string | number | undefined;
  readonly completedAt?: string | number | undefined;
}

export interface TimelinePoint {
  readonly point: TimelinePointName;
  readonly label: string;
  /** ms since the epoch. */
  readonly at: number;
  /** Since the point before it in time; undefined for the first. */
  readonly sincePreviousMs: number | undefined;
  /** Since the job was queued (negative: before it); undefined without a queued time. */
  readonly sinceQueuedMs: number | undefined;
}

export interface JobTimeline {
  readonly vm: string;
  readonly node: string | undefined;
  readonly points: readonly TimelinePoint[];
  /** Points with no time (not reached, or not known to the caller), in timeline order. */
  readonly missing: readonly TimelinePointName[];
  /** The runner was online before the job was queued; undefined if either is unknown. */
  readonly warm: boolean | undefined;
  /** queued → job started (what gha_job_startup_duration_seconds observes). */
  readonly startupMs: number | undefined;
  /** job started → job finished (gha_job_execution_duration_seconds). */
  readonly executionMs: number | undefined;
  /** VM created → setup delivered: what a cold start costs before the runner can take a job. */
  readonly vmReadyMs: number | undefined;
}

type AnyVM = Readonly<Stored<ImpVM>> | Cached<ImpVM>;

function ms(t: string | number | undefined): number | undefined {
  if (t === undefined) return undefined;
  const v = typeof t === "number" ? t : Date.parse(t);
  return Number.isFinite(v) ? v : undefined;
}

const diff = (from: number | undefined, to: number | undefined): number | undefined => (from === undefined || to === undefined ? undefined : to - from);

export function jobTimeline(vm: AnyVM, job?: JobTimes, replacement?: AnyVM): JobTimeline {
  const p = vmPoints(vm);
  const queued = ms(job?.queuedAt);
  const at: Record<TimelinePointName, number | undefined> = {
    queued,
    vm_created: p.vm_created,
    vm_bound: p.vm_bound,
    setup_minted: p.setup_minted,
    disk_ready: p.disk_ready,
    booted: p.booted,
    setup_delivered: p.setup_delivered,
    job_started: ms(job?.startedAt),
    job_finished: ms(job?.completedAt) ?? p.vm_finished,
    cleaned: p.cleaned,
    replacement_online: replacement === undefined ? undefined : vmPoints(replacement).setup_delivered,
  };
  const present = TIMELINE_POINTS.flatMap((point, order) => {
    const t = at[point];
    return t === undefined ? [] : [{ point, order, t }];
  }).sort((a, b) => a.t - b.t || a.order - b.order);
  const points = present.map(({ point, t }, i): TimelinePoint => ({
    point,
    label: TIMELINE_LABELS[point],
    at: t,
    sincePreviousMs: i === 0 ? undefined : t - (present[i - 1]?.t ?? t),
    sinceQueuedMs: diff(queued, t),
  }));
  return {
    vm: vm.metadata.name,
    node: vm.status?.nodeName,
    points,
    missing: TIMELINE_POINTS.filter((point) => at[point] === undefined),
    warm: queued === undefined || p.setup_delivered === undefined ? undefined : p.setup_delivered <= queued,
    startupMs: diff(queued, at.job_started),
    executionMs: diff(at.job_started, at.job_finished),
    vmReadyMs: diff(p.vm_created, p.setup_delivered),
  };
}

/**
 * The VM that replaced `vm` in its pool: the pool makes a new runner when one becomes busy (busy +
 * minIdle), so it is the first other VM of the same pool created at or after the job started
 * (`jobStartedAt`; without it, after `vm`'s runner came online).
 */
export function findReplacement<V extends AnyVM>(vm: AnyVM, candidates: readonly V[], jobStartedAt?: string | number): V | undefined {
  const pool = vm.metadata.labels?.[LABELS.pool];
  const after = ms(jobStartedAt) ?? vmPoints(vm).setup_delivered;
  if (pool === undefined || after === undefined) return undefined;
  let best: { vm: V; created: number } | undefined;
  for (const c of candidates) {
    const created = vmPoints(c).vm_created;
    if (c.metadata.uid === vm.metadata.uid || c.metadata.labels?.[LABELS.pool] !== pool || c.metadata.namespace !== vm.metadata.namespace || created === undefined) continue;
    // Kubernetes' creationTimestamp has whole seconds: allow the second the job started in.
    if (created < Math.floor(after / 1000) * 1000) continue;
    if (best === undefined || created < best.created) best = { vm: c, created };
  }
  return best?.vm;
}

const secs = (v: number): string => `${v < 0 ? "-" : "+"}${(Math.abs(v) / 1000).toFixed(3)} s`;

/** The timeline as lines for a terminal: label, time since queued (or since the first point), time since the previous point. */
export function formatJobTimeline(t: JobTimeline): string[] {
  const first = t.points[0]?.at ?? 0;
  const lines = [`job timeline of VM ${t.vm}${t.node === undefined ? "" : ` on ${t.node}`}${t.warm === undefined ? "" : t.warm ? " (warm: runner was online before the job was queued)" : " (cold)"}`];
  for (const p of t.points) {
    const offset = p.sinceQueuedMs ?? p.at - first;
    lines.push(`  ${p.label.padEnd(19)} ${secs(offset).padStart(12)}${p.sincePreviousMs === undefined ? "" : `   (${secs(p.sincePreviousMs)} after ${previousLabel(t, p)})`}`);
  }
  if (t.missing.length > 0) lines.push(`  not recorded: ${t.missing.map((m) => TIMELINE_LABELS[m]).join(", ")}`);
  return lines;
}

function previousLabel(t: JobTimeline, p: TimelinePoint): string {
  const i = t.points.indexOf(p);
  return t.points[i - 1]?.label ?? "";
}
