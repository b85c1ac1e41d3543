/**
 * Job startup latency, job queued → job running, on the real runner path (test/e2e/runner-path:
 * control plane, `imp operator`, two `imp agent`s, registry, QEMU, the GitHub test server), for
 * both ways a pool learns of demand (webhook mode and scale-set mode), side by side in one run,
 * alternating so the machine's noise hits every case alike:
 *   warm: a pool with minIdle 1 — an idle runner is waiting when the job is queued;
 *   cold: a pool with minIdle 0 — the job's demand makes the pool create a VM for it (webhook mode:
 *         its queued webhook; scale-set mode: the scale set's JobAvailable and statistics);
 *   dropped: cold, with the job's queued webhook never delivered (webhook mode: the pool's listing
 *         of queued jobs finds it, so startup ≈ the listing interval; scale-set mode: unaffected).
 * and on a real forge, a real Gitea 1.27.3 with the real gitea-runner in the VMs (gitea-warm,
 * gitea-cold: demand is Gitea's queued-job listing every 5 s; giteahook-cold: Gitea's signed
 * workflow_job webhook, the listing only its 30 s backstop). Each Gitea job is the one of the run
 * its own push started (its head_sha).
 *   snapshot: cold, on a class with `startFrom: Snapshot` (webhook-snapshot, gitea-snapshot): the
 *         job's VM is restored from its node's memory snapshot of a template instead of booted.
 *         Before the measured rounds each snapshot pool runs unmeasured jobs until a template exists
 *         (the first VM on a node boots and leaves one); a measured job whose VM still booted (it
 *         landed on the other node before that node had its template) is counted apart, not mixed in.
 * For warm cases also: job end →
 * replacement runner online (the next job's warm start depends on it).
 * GitHub cases time the test server's own clock; Gitea cases the job's creation (Gitea's
 * created_at, whole seconds, raised to the moment the push was sent) to the moment Gitea first
 * shows the job taken (polled every 50 ms): this host's clock either way, never the guest's.
 * For each job: startup (GitHub's queued → started, what ARC's gha_job_startup_duration_seconds
 * measures), the VMM boot of the VM that ran it (spawn → guest hello, measured by the agent in the
 * same run), and Imp's own overhead = startup − VMM boot for a cold start (the boot happened before
 * the job for a warm one, so there all of startup is overhead). The cold start is broken into the
 * timeline's steps. Targets: warm ≤ 1 s; cold ≤ VMM boot + 2 s; snapshot ≤ 25 % of cold (Gitea: with
 * the average listing wait taken off both).
 *
 *   node bench/startup.ts [--jobs 5] [--modes webhook-cold,webhook-snapshot]   # --modes: measure only these cases
 */
import { parseArgs } from "node:util";
import { jobTimeline, type TimelinePointName } from "../src/operator/index.ts";
import type { ImpVM } from "../src/api/index.ts";
import { waitFor } from "../src/shared/index.ts";
import type { TestJob } from "../test/github/server.ts";
import { giteaWorldUnavailable, nameOf, RunnerWorld } from "../test/e2e/runner-path/world.ts";
import { median, percentile, table } from "./stats.ts";

const { values } = parseArgs({ options: { jobs: { type: "string", default: "5" }, modes: { type: "string" } } });
const jobs = Number(values.jobs);
const why = await giteaWorldUnavailable();
if (why !== undefined) {
  process.stdout.write(`bench:startup: cannot run on this machine: ${why}\n`);
  process.exit(1);
}

type Start = "warm" | "cold" | "dropped" | "snapshot";
type Demand = "webhook" | "scaleset" | "gitea" | "giteahook";
type Mode = `${Demand}-${Start}`;
const ALL_MODES: readonly Mode[] = ["webhook-warm", "scaleset-warm", "gitea-warm", "webhook-cold", "webhook-snapshot", "scaleset-cold", "gitea-cold", "gitea-snapshot", "giteahook-cold", "webhook-dropped", "scaleset-dropped"];
/** The cases measured: all, or those --modes names (only their pools are created: an idle VM of an unmeasured warm pool would hold a VM slot, and a node short of slots builds no snapshot template). */
const MODES: readonly Mode[] = values.modes === undefined ? ALL_MODES : values.modes.split(",").map((m) => m.trim()).map((m) => {
  if (!(ALL_MODES as readonly string[]).includes(m)) throw new Error(`--modes: unknown case ${m}; the cases are ${ALL_MODES.join(", ")}`);
  return m as Mode;
});
interface Sample {
  readonly mode: Mode;
  /** Warm cases: the job's end → the next idle runner online. */
  readonly replacementMs?: number;
  readonly startupMs: number;
  readonly bootMs: number;
  readonly overheadMs: number;
  readonly executionMs: number;
  readonly steps: Partial<Record<TimelinePointName, number>>;
  /** How the job's VM started: booted, or restored from a memory snapshot. */
  readonly startedFrom: "Boot" | "Snapshot";
}

/** The pool a case's jobs go to: dropped cases use the cold pools. */
const poolOf = (mode: Mode): string => mode.replace("-dropped", "-cold");
/** Whether some measured case sends its jobs to `pool`. */
const measured = (pool: string): boolean => MODES.some((m) => poolOf(m) === pool);
/** A webhook pool's jobs carry its labels; a scale set's name it (runs-on: <scale set>). */
const labels = (mode: Mode): string[] => (mode.startsWith("scaleset") ? [poolOf(mode)] : ["self-hosted", "imp", poolOf(mode)]);
const steps = [{ name: "hi", run: "echo hi" }];
const samples: Sample[] = [];

const world = await RunnerWorld.start({ gitea: true, say: (line) => process.stdout.write(`  ${line}\n`) });
// Supervised VMMs outlive this process by design: on Ctrl-C remove the world before exiting.
const onSignal = (): void => void world.dispose().finally(() => process.exit(130));
process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
const gitea = world.gitea;
if (gitea === undefined) throw new Error("the world has no Gitea");
const ofPool = (vms: ImpVM[], pool: string): ImpVM[] => vms.filter((vm) => vm.metadata.labels?.["imp.dev/pool"] === pool);
const online = async (pool: string): Promise<Set<string>> =>
  pool.startsWith("gitea")
    ? new Set((await gitea.runners(`/repos/acme/${pool}`)).filter((r) => r.status === "online" && !r.busy).map((r) => r.name))
    : new Set([...world.github.runners.values()].filter((r) => r.status === "online" && !r.busy).map((r) => r.name));
const idleRunner = (pool: string, except = ""): Promise<ImpVM> =>
  world.waitUntil(`an idle runner of ${pool}`, async () => {
    const idle = await online(pool);
    return ofPool(await world.listVms(), pool).find((vm) => nameOf(vm) !== except && vm.status?.phase === "Running" && idle.has(nameOf(vm)));
  }, 600_000, 100);
try {
  for (const demand of ["webhook", "scaleset"] as const) {
    if (measured(`${demand}-warm`)) await world.applyPool(`${demand}-warm`, { minIdle: 1, maxConcurrent: 1, labels: ["self-hosted", "imp", `${demand}-warm`], scaleSet: demand === "scaleset" });
    if (measured(`${demand}-cold`)) await world.applyPool(`${demand}-cold`, { minIdle: 0, maxConcurrent: 1, labels: ["self-hosted", "imp", `${demand}-cold`], scaleSet: demand === "scaleset" });
  }
  if (measured("webhook-snapshot")) await world.applyPool("webhook-snapshot", { minIdle: 0, maxConcurrent: 1, labels: ["self-hosted", "imp", "webhook-snapshot"], snapshot: true });
  const giteaPools = ["gitea-warm", "gitea-cold", "gitea-snapshot", "giteahook-cold"].filter(measured);
  for (const pool of giteaPools) {
    await gitea.createRepo("acme", pool);
    const webhook = pool.startsWith("giteahook");
    if (webhook) await world.hookGitea("acme", pool);
    // One workflow; every later push (a trigger file) starts one run of it.
    await gitea.putFile("acme", pool, ".gitea/workflows/bench.yml", `on: [push]\njobs:\n  hi:\n    runs-on: ${pool}\n    steps:\n      - run: echo hi\n`);
    await world.applyGiteaPool(pool, { minIdle: pool.endsWith("warm") ? 1 : 0, maxConcurrent: 1, labels: [pool], webhook, snapshot: pool.endsWith("snapshot") }, undefined, `acme/${pool}`);
  }
  // The workflow's own first run (its push) goes first, unmeasured.
  await world.waitUntil("the Gitea workflows' first runs done", async () => {
    for (const pool of giteaPools) if ((await gitea.jobs("acme", pool)).some((j) => j.status !== "completed")) return undefined;
    return true;
  }, 600_000, 500);
  // Each snapshot pool's unmeasured jobs until one was restored: the node it lands on has a template.
  for (const mode of (["webhook-snapshot", "gitea-snapshot"] as const).filter((m) => MODES.includes(m))) {
    for (let i = 0; i < 6; i++) {
      await waitFor(`no VM of ${mode}`, async () => (ofPool(await world.listVms(), mode).length === 0 ? true : undefined), { timeoutMs: 300_000, intervalMs: 200 });
      const { sample } = mode === "gitea-snapshot" ? await giteaSample(mode, mode, `warmup-${i + 1}`) : await gitHubSample(mode, `warmup-${i + 1}`);
      process.stdout.write(`  ${mode} warm-up ${i + 1}: ${sample.startedFrom === "Snapshot" ? "restored" : "booted"}\n`);
      if (sample.startedFrom === "Snapshot") break;
    }
  }
  for (let i = 0; i < jobs; i++) {
    for (const mode of MODES) {
      const pool = poolOf(mode);
      const warm = mode.endsWith("warm");
      const ran = warm ? await idleRunner(pool) : undefined;
      if (!warm) await waitFor(`no VM of ${pool}`, async () => (ofPool(await world.listVms(), pool).length === 0 ? true : undefined), { timeoutMs: 300_000, intervalMs: 200 });
      const sample = mode.startsWith("gitea") ? await giteaSample(mode, pool, String(i + 1)) : await gitHubSample(mode, String(i + 1));
      const replacementMs = ran === undefined ? undefined : (await idleRunner(pool, nameOf(ran)), Date.now() - sample.endedAt);
      samples.push({ ...sample.sample, ...(replacementMs === undefined ? {} : { replacementMs }) });
      const s = samples.at(-1);
      process.stdout.write(`  ${mode}-${i + 1}: startup ${s?.startupMs} ms, ${s?.startedFrom === "Snapshot" ? "restore" : "boot"} ${s?.bootMs} ms, overhead ${s?.overheadMs} ms${replacementMs === undefined ? "" : `, replacement online ${replacementMs} ms after the job`}\n`);
    }
  }
} finally {
  await world.dispose();
}

/** `tag` names the job (`<mode>-<tag>`): its round, or a warm-up's. */
async function gitHubSample(mode: Mode, tag: string): Promise<{ sample: Sample; endedAt: number }> {
  if (mode.endsWith("dropped")) world.github.webhooks.dropNext = 1;
  const job = world.queueJob(`${mode}-${tag}`, steps, labels(mode));
  await world.waitForJob(job, "completed", 600_000);
  return { sample: sampleOf(mode, job), endedAt: job.completedAt ?? Date.now() };
}

async function giteaSample(mode: Mode, pool: string, tag: string): Promise<{ sample: Sample; endedAt: number }> {
  const g = gitea as NonNullable<typeof gitea>;
  const pushedAt = Date.now();
  const sha = await g.putFile("acme", pool, `trigger-${tag}.txt`, `${mode} ${tag}\n`);
  // The job of the run this push started, nothing else: its head_sha is the push's commit. Its
  // start is when Gitea first shows it taken, on this host's clock (polled every 50 ms): the
  // runner's own log lines carry the guest's clock, which under TCG lags the host's by up to a
  // second (they made warm startups negative).
  let startedAt = Number.NaN;
  const job = await world.waitUntil(`${mode}-${tag} completed on Gitea`, async () => {
    const mine = (await g.jobs("acme", pool)).find((j) => j.head_sha === sha);
    if (mine !== undefined && mine.status !== "queued" && mine.status !== "waiting" && Number.isNaN(startedAt)) startedAt = Date.now();
    return mine?.status === "completed" ? mine : undefined;
  }, 600_000, 50);
  const log = await g.jobLog("acme", pool, job.id);
  const received = /^(\S+Z) (\S+)\(version:[^)]*\) received task/m.exec(log);
  if (received === null || sha === "") throw new Error(`${mode}-${tag}: job ${job.id} (commit ${sha || "?"}) has no "received task" line in its own log`);
  const runner = received[2] ?? "";
  const queuedAt = Math.max(Date.parse(job.created_at ?? ""), pushedAt);
  const vm = world.history(runner)?.last;
  const startedFrom = vm?.status?.startedFrom ?? "Boot";
  const bootMs = vm?.status?.bootDurationMs ?? Number.NaN;
  const startupMs = startedAt - queuedAt;
  // Execution on the guest's own clock (first and last line of its log), so its skew cancels out.
  const stamps = [...log.matchAll(/^(\S+Z) /gm)].map((m) => Date.parse(m[1] ?? ""));
  const executionMs = (stamps.at(-1) ?? Number.NaN) - (stamps[0] ?? Number.NaN);
  const endedAt = startedAt + executionMs || Date.now();
  return { sample: { mode, startupMs, bootMs, overheadMs: mode.endsWith("warm") ? startupMs : startupMs - bootMs, executionMs, steps: {}, startedFrom }, endedAt };
}

function sampleOf(mode: Mode, job: TestJob): Sample {
  const vm = world.history(job.runnerName ?? "")?.last;
  if (vm === undefined || job.startedAt === undefined) throw new Error(`job ${job.name} ran on no VM this bench saw`);
  const t = jobTimeline(vm, { queuedAt: job.queuedAt, startedAt: job.startedAt, completedAt: job.completedAt });
  const startupMs = job.startedAt - job.queuedAt;
  const bootMs = vm.status?.bootDurationMs ?? Number.NaN;
  const stepMs: Partial<Record<TimelinePointName, number>> = {};
  for (const p of t.points) if (p.sincePreviousMs !== undefined) stepMs[p.point] = p.sincePreviousMs;
  return { mode, startupMs, bootMs, overheadMs: mode.endsWith("warm") ? startupMs : startupMs - bootMs, executionMs: t.executionMs ?? Number.NaN, steps: stepMs, startedFrom: vm.status?.startedFrom ?? "Boot" };
}

/** A snapshot case's samples are its restored VMs' only; the others are counted in the table's note. */
const samplesOf = (mode: Mode): Sample[] => samples.filter((s) => s.mode === mode && (!mode.endsWith("snapshot") || s.startedFrom === "Snapshot"));
const rows = MODES.map((mode) => {
  const of = samplesOf(mode);
  const col = (f: (s: Sample) => number): number[] => of.map(f);
  const startup = col((s) => s.startupMs);
  const boot = col((s) => s.bootMs);
  const overhead = col((s) => s.overheadMs);
  const replacement = of.map((s) => s.replacementMs).filter((x): x is number => x !== undefined);
  const warm = mode.endsWith("warm");
  const listed = mode === "webhook-dropped" ? 30_000 : mode.startsWith("gitea-") && !warm ? 5_000 : 0;
  const coldOf = mode === "gitea-snapshot" ? "gitea-cold" : "webhook-cold";
  const snapshot = mode.endsWith("snapshot");
  // A restore cannot shorten Gitea's listing wait (half its interval on average): that part is
  // taken off both sides before the 25 % comparison.
  const wait = listed / 2;
  const coldMedian = median(samplesOf(coldOf).map((s) => s.startupMs));
  const target = warm ? "startup ≤ 1000 ms" : snapshot ? (wait > 0 ? `startup − ${wait / 1000} s ≤ 25 % of ${coldOf}'s − ${wait / 1000} s` : `startup ≤ 25 % of ${coldOf}`) : listed > 0 ? `startup ≤ listing interval (${listed / 1000} s) + boot + 2000 ms` : "startup ≤ boot + 2000 ms";
  const met = warm ? percentile(startup, 50) <= 1000 : snapshot ? median(startup) - wait <= 0.25 * (coldMedian - wait) : percentile(overhead, 50) <= listed + 2000;
  const judged = of.length > 0 && (!snapshot || Number.isFinite(coldMedian));
  return [mode, of.length, median(startup), percentile(startup, 95), warm ? Number.NaN : median(boot), warm ? Number.NaN : percentile(boot, 95), median(overhead), percentile(overhead, 95), warm ? median(replacement) : Number.NaN, median(col((s) => s.executionMs)), target, !judged ? "n/a (not measured)" : met ? "met (median)" : "missed (median)"];
});
table(
  `Job startup, queued → running (${jobs} jobs each, alternating; ${world.kernelLabel})`,
  ["case", "jobs", "startup p50 ms", "startup p95 ms", "VMM boot p50 ms", "VMM boot p95 ms", "Imp overhead p50 ms", "overhead p95 ms", "replacement online p50 ms", "execution p50 ms", "target", "result"],
  rows,
);
const coldSteps: TimelinePointName[] = ["vm_created", "vm_bound", "setup_minted", "disk_ready", "booted", "setup_delivered", "job_started"];
for (const mode of (["webhook-cold", "webhook-snapshot", "scaleset-cold"] as const).filter((m) => MODES.includes(m))) {
  const cold = samplesOf(mode);
  table(
    `Cold start by step, ${mode} (time since the previous point of the job's timeline)`,
    ["step", "p50 ms", "p95 ms"],
    coldSteps.map((step) => {
      const v = cold.map((s) => s.steps[step]).filter((x): x is number => x !== undefined);
      return [step, median(v), percentile(v, 95)];
    }),
  );
}
const med = (mode: Mode): number => median(samplesOf(mode).map((s) => s.startupMs));
const booted = (mode: Mode): number => samples.filter((s) => s.mode === mode && s.startedFrom === "Boot").length;
const ratio = (a: Mode, b: Mode, digits = 2): string => (Number.isFinite(med(a) / med(b)) ? `${(med(a) / med(b)).toFixed(digits)}×` : "no sample");
process.stdout.write(`\nsnapshot cases: restored VMs only in the table; measured jobs whose VM booted instead (no template on its node yet): webhook ${booted("webhook-snapshot")}, Gitea ${booted("gitea-snapshot")}. Startup median ratios snapshot/cold: webhook ${ratio("webhook-snapshot", "webhook-cold")}, Gitea ${ratio("gitea-snapshot", "gitea-cold")}; snapshot/warm webhook ${ratio("webhook-snapshot", "webhook-warm", 1)}\n`);
process.stdout.write(`\nstartup median ratios: cold/warm webhook ${ratio("webhook-cold", "webhook-warm", 1)}, scale set ${ratio("scaleset-cold", "scaleset-warm", 1)}, Gitea ${ratio("gitea-cold", "gitea-warm", 1)}; scale set/webhook cold ${ratio("scaleset-cold", "webhook-cold", 2)}, warm ${ratio("scaleset-warm", "webhook-warm", 2)}; Gitea listing/GitHub webhook cold ${ratio("gitea-cold", "webhook-cold", 2)}, Gitea webhook/GitHub webhook cold ${ratio("giteahook-cold", "webhook-cold", 2)}, Gitea webhook/Gitea listing cold ${ratio("giteahook-cold", "gitea-cold", 2)}, Gitea/GitHub warm ${ratio("gitea-warm", "webhook-warm", 2)}; dropped/cold webhook ${ratio("webhook-dropped", "webhook-cold", 1)}, scale set ${ratio("scaleset-dropped", "scaleset-cold", 2)}\n`);
