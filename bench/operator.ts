/**
 * `npm run bench:operator`: the whole operator (scheduler, node loss, pools, setup) in its own
 * process against a real kube-apiserver (src/devcluster) and the GitHub test server, with 50
 * simulated nodes (ImpNode with capacity and a setup key, an agent Lease renewed every 10 s) and
 * simulated agents (this process writes the agent-owned VM status: Booting with the setup
 * delivered, Running, Succeeded).
 *
 *   fill:  pools with minIdle summing to 1,000 → 1,000 VMs created, bound, registered, Running
 *   churn: each of those 1,000 ends its job (Succeeded, spread over CHURN_SPREAD) → deregistered,
 *          deleted, replaced; done when 1,000 replacements run and the ended VMs are gone
 *
 * Measured: bind latency (VM first seen → status.nodeName seen, both by this process's watch),
 * VM terminal → its pool's replacement bound, reconcile durations (the operator's histograms),
 * the operator's API requests (writes per VM in fill, per lifecycle in churn) and GitHub requests,
 * counted inside the operator process, and the operator's RSS.
 *
 *   IMP_BENCH_VMS=1000 IMP_BENCH_NODES=50 IMP_BENCH_POOLS=50 node bench/operator.ts
 *   IMP_BENCH_VMS=100 IMP_BENCH_NODES=10 IMP_BENCH_POOLS=10 node bench/operator.ts   # quick
 *
 * Why several pools, each with its own GitHub host alias (127.0.0.N): @octokit/plugin-throttling
 * spaces one installation's write requests 1 s apart (GitHub asks this of integrations), so one
 * installation registers at most ~1 runner a second and a lifecycle costs two writes (mint, delete).
 * Each alias gets its own limiter, as separate installations would; the table shows the limit.
 */
import { fork } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { API_VERSION, GITHUB_APP_SECRET_KEYS, LABELS, SETUP_SEAL_SUITE, generateNodeKeyPair, type ImpNode, type ImpVM, type ImpVMRunnerPool, IMP_VM_CLASSES, IMP_VM_TEMPLATES, buildAllCrds } from "../src/api/index.ts";
import { startControlPlane } from "../src/devcluster/index.ts";
import { createResourceClient, Informer, LEASE_RESOURCE, microTime, type KubeObject, type Lease, installCrds } from "../src/kube/index.ts";
import { agentLeaseName, DEFAULT_AGENT_LEASE_NAMESPACE, IMP_NODES, IMP_VM_RUNNER_POOLS, IMP_VMS, SECRETS, type SecretObject } from "../src/operator/index.ts";
import { createLogger, waitFor } from "../src/shared/index.ts";
import { APP_ID, INSTALLATION_ID, appKeyPair } from "../test/github/harness.ts";
import { GitHubTestServer } from "../test/github/server.ts";
import type { OperatorReport, OperatorSample } from "./operator-process.ts";
import { IMP_NODE_FLAGS } from "../src/cli/node-flags.ts";

const env = process.env;
const VMS = Number(env["IMP_BENCH_VMS"] ?? 1000);
const NODES = Number(env["IMP_BENCH_NODES"] ?? 50);
const POOLS = Math.min(Number(env["IMP_BENCH_POOLS"] ?? 50), VMS);
const CHURN_SPREAD_MS = Number(env["IMP_BENCH_CHURN_SPREAD_MS"] ?? 30_000);
const PHASE_TIMEOUT_MS = Number(env["IMP_BENCH_PHASE_TIMEOUT_MS"] ?? 900_000);
/** The operator's node flags: those `imp` starts with unless IMP_BENCH_NODE_FLAGS says otherwise ("" = none). */
const BENCH_NODE_FLAGS: readonly string[] = env["IMP_BENCH_NODE_FLAGS"] === undefined ? IMP_NODE_FLAGS : env["IMP_BENCH_NODE_FLAGS"].split(" ").filter((f) => f !== "");
/** The operator's setup workers (mint, deregister); unset = its default. */
const SETUP_WORKERS = env["IMP_BENCH_SETUP_WORKERS"] === undefined ? undefined : Number(env["IMP_BENCH_SETUP_WORKERS"]);
const NS = "bench";
const SLOTS = Math.ceil((VMS / NODES) * 1.3) + 2;
const AGENT_WRITES_IN_FLIGHT = 16;
const NAMESPACES = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false } as const;
const b64 = (s: string): string => Buffer.from(s).toString("base64");
const seconds = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
const log = (msg: string): void => void process.stderr.write(`[bench:operator ${((performance.now() - t0) / 1000).toFixed(1)} s] ${msg}\n`);
const t0 = performance.now();

if (![VMS, NODES, POOLS].every((n) => Number.isInteger(n) && n > 0)) throw new Error("IMP_BENCH_VMS, IMP_BENCH_NODES and IMP_BENCH_POOLS must be positive integers");
if (Math.ceil(VMS / POOLS) > 1000) throw new Error("at most 1,000 VMs per pool (maxConcurrent's limit): raise IMP_BENCH_POOLS");

log(`${VMS} VMs, ${NODES} nodes (${SLOTS} slots each), ${POOLS} pools; starting the control plane`);
const plane = await startControlPlane({ controllerManager: false });

/** CPU seconds (user + system) the plane's processes and this one (simulated agents, GitHub test server) used so far. */
function planeCpu(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, pid] of Object.entries(plane.state().pids)) {
    if (pid === undefined) continue;
    try {
      // /proc/<pid>/stat: utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
      const text = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = text.slice(text.lastIndexOf(")") + 1).trim().split(/\s+/); // the name may hold ") "; it ends at the last one
      out[name] = (Number(fields[11]) + Number(fields[12])) / 100;
    } catch {
      // not Linux, or the process is gone: no row for it
    }
  }
  const own = process.cpuUsage();
  out["bench (agents, GitHub server)"] = (own.user + own.system) / 1e6;
  return out;
}
const keys = appKeyPair();
const github = await new GitHubTestServer({ appId: APP_ID, installationId: INSTALLATION_ID, appPublicKey: keys.publicKey, host: "0.0.0.0" }).start();
const githubPort = new URL(github.url).port;
const stop = new AbortController();
let child: ReturnType<typeof fork> | undefined;

try {
  const kc = plane.kubeConfig;
  await installCrds(kc, buildAllCrds());
  const namespaces = createResourceClient<KubeObject>(kc, NAMESPACES);
  for (const name of [NS, DEFAULT_AGENT_LEASE_NAMESPACE]) await namespaces.create({ apiVersion: "v1", kind: "Namespace", metadata: { name } });
  const vms = createResourceClient<ImpVM>(kc, IMP_VMS);
  const nodes = createResourceClient<ImpNode>(kc, IMP_NODES);
  const leases = createResourceClient<Lease>(kc, LEASE_RESOURCE);
  const secrets = createResourceClient<SecretObject>(kc, SECRETS);
  const pools = createResourceClient<ImpVMRunnerPool>(kc, IMP_VM_RUNNER_POOLS);
  await createResourceClient<KubeObject & { spec: unknown }>(kc, IMP_VM_CLASSES).create({ apiVersion: API_VERSION, kind: "ImpVMClass", metadata: { name: "small" }, spec: { vcpu: 1, memoryMiB: 512, scratchDisk: "1Gi", arch: "amd64" } });
  await createResourceClient<KubeObject & { spec: unknown }>(kc, IMP_VM_TEMPLATES).create({
    apiVersion: API_VERSION,
    kind: "ImpVMTemplate",
    metadata: { name: "runner", namespace: NS },
    spec: { classRef: { name: "small" }, image: "registry.test/runner:1", kernel: "default", expireAfter: "1h" },
  });

  // Simulated nodes: an ImpNode with room and a setup key, and a fresh agent Lease.
  const nodeNames = Array.from({ length: NODES }, (_, i) => `node-${String(i).padStart(3, "0")}`);
  const key = await generateNodeKeyPair();
  for (const name of nodeNames) {
    await nodes.create({ apiVersion: API_VERSION, kind: "ImpNode", metadata: { name }, spec: { unschedulable: false } });
    await nodes.patchStatus(
      { name },
      { status: { arch: "amd64", kernels: ["default"], capacity: { vcpu: SLOTS * 2, memoryMiB: SLOTS * 1024, vmSlots: SLOTS }, allocated: { vcpu: 0, memoryMiB: 0, vmSlots: 0 }, setupKey: { algorithm: SETUP_SEAL_SUITE, keyId: key.keyId, publicKey: key.publicKey } } },
    );
    await leases.create({ apiVersion: "coordination.k8s.io/v1", kind: "Lease", metadata: { name: agentLeaseName(name), namespace: DEFAULT_AGENT_LEASE_NAMESPACE }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: microTime(Date.now()) } });
  }
  const renewLeases = async (): Promise<void> => {
    while (!stop.signal.aborted) {
      await new Promise((r) => setTimeout(r, 10_000));
      for (const name of nodeNames) {
        if (stop.signal.aborted) return;
        await leases.patch({ namespace: DEFAULT_AGENT_LEASE_NAMESPACE, name: agentLeaseName(name) }, { spec: { renewTime: microTime(Date.now()) } }).catch((err: unknown) => log(`lease renewal failed: ${String(err)}`));
      }
    }
  };
  void renewLeases();

  // What happened to each VM, as this process's watch saw it (ms on performance.now()).
  interface Seen {
    pool: string;
    created: number;
    bound?: number;
    minted?: number;
    running?: number;
    terminal?: number;
    gone?: number;
    wave: "fill" | "churn";
  }
  const seen = new Map<string, Seen>();
  let phase: "fill" | "churn" = "fill";
  const endedAt = new Map<string, number[]>(); // pool → terminal times waiting for a replacement
  const replacementMs: number[] = [];
  let agentWrites = 0;
  let inFlight = 0;
  const waiting: Array<() => void> = [];
  const agentWrite = async (write: () => Promise<unknown>): Promise<void> => {
    while (inFlight >= AGENT_WRITES_IN_FLIGHT) await new Promise<void>((r) => waiting.push(r));
    inFlight++;
    try {
      agentWrites++;
      await write();
    } catch (err) {
      if (!stop.signal.aborted) log(`agent write failed: ${String(err).slice(0, 300)}`);
    } finally {
      inFlight--;
      waiting.shift()?.();
    }
  };
  const booted = new Set<string>();
  const ran = new Set<string>();
  const ended = new Set<string>();

  const observe = (vm: Readonly<ImpVM>): void => {
    const name = vm.metadata.name ?? "";
    const now = performance.now();
    let s = seen.get(name);
    if (s === undefined) {
      s = { pool: vm.metadata.labels?.[LABELS.pool] ?? "", created: now, wave: phase };
      seen.set(name, s);
    }
    const status = vm.status;
    if (s.bound === undefined && status?.nodeName !== undefined) {
      s.bound = now;
      const queue = endedAt.get(s.pool);
      if (s.wave === "churn" && queue !== undefined && queue.length > 0) replacementMs.push(now - queue.shift()!);
    }
    if (s.minted === undefined && status?.setup?.state === "Minted") s.minted = now;
    if (s.running === undefined && status?.phase === "Running") s.running = now;
    if (s.terminal === undefined && (status?.phase === "Succeeded" || status?.phase === "Failed")) {
      s.terminal = now;
      endedAt.set(s.pool, [...(endedAt.get(s.pool) ?? []), now]);
    }
    // The simulated agent: a minted setup is delivered and the runner starts (two writes, as the
    // agent's Booting and Running); nothing else of the agent's work is simulated.
    const ref = { namespace: NS, name };
    if (status?.setup?.state === "Minted" && status.nodeName !== undefined && !booted.has(name)) {
      booted.add(name);
      void agentWrite(() => vms.patchStatus(ref, { status: { phase: "Booting", setup: { state: "Delivered", deliveredAt: seconds(Date.now()) } } }));
    } else if (status?.phase === "Booting" && status.setup?.state === "Delivered" && !ran.has(name)) {
      ran.add(name);
      void agentWrite(() => vms.patchStatus(ref, { status: { phase: "Running", phaseTimestamps: { ...status.phaseTimestamps, running: seconds(Date.now()) } } }));
    }
  };
  const endJob = (name: string): Promise<void> => {
    ended.add(name);
    return agentWrite(() => vms.patchStatus({ namespace: NS, name }, { status: { phase: "Succeeded", exitCode: 0, reason: "Completed", phaseTimestamps: { succeeded: seconds(Date.now()) } } }));
  };
  const cache = new Informer({ client: vms, namespace: NS, logger: createLogger({ level: "warn", name: "bench-agents" }) });
  cache.addEventHandler({
    onAdd: (vm) => observe(vm as Readonly<ImpVM>),
    onUpdate: (_old, vm) => observe(vm as Readonly<ImpVM>),
    onDelete: (vm) => {
      const s = seen.get(vm.metadata.name ?? "");
      if (s !== undefined) s.gone = performance.now();
    },
  });
  void cache.start(stop.signal);
  await cache.waitForSync(stop.signal);

  // The operator, in its own process.
  const samples: OperatorSample[] = [];
  let report: OperatorReport | undefined;
  let pendingSample: ((s: OperatorSample) => void) | undefined;
  child = fork(join(import.meta.dirname, "operator-process.ts"), [], {
    env: { ...env, IMP_BENCH_OPERATOR: JSON.stringify({ kubeconfigPath: plane.kubeconfigPath, namespace: NS, apiServer: plane.server, logLevel: env["IMP_BENCH_LOG"] ?? "error", ...(SETUP_WORKERS === undefined ? {} : { setupWorkers: SETUP_WORKERS }) }) },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    execArgv: [...process.execArgv, ...BENCH_NODE_FLAGS, "--expose-gc"],
  });
  child.on("message", (m: OperatorSample | OperatorReport) => {
    if (m.type === "sample") {
      samples.push(m);
      pendingSample?.(m);
      pendingSample = undefined;
    } else report = m;
  });
  const childExit = new Promise<number | null>((resolve) => child?.once("exit", (code) => resolve(code)));
  const sampleNow = (gc = false): Promise<OperatorSample> =>
    new Promise((resolve) => {
      pendingSample = resolve;
      child?.send({ type: "sample", gc });
    });
  await waitFor("the operator's first sample", async () => (samples.length > 0 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100 });
  const atStart = await sampleNow(true);
  const cpuAtStart = planeCpu();

  // Pools: VMS idle runners in all, each pool in its own repository and behind its own GitHub host alias.
  const per = Math.floor(VMS / POOLS);
  const fillStarted = performance.now();
  for (let i = 0; i < POOLS; i++) {
    const name = `pool-${String(i).padStart(3, "0")}`;
    const size = per + (i < VMS % POOLS ? 1 : 0);
    await secrets.create({ apiVersion: "v1", kind: "Secret", metadata: { name: `${name}-app`, namespace: NS }, data: { [GITHUB_APP_SECRET_KEYS.appId]: b64(String(APP_ID)), [GITHUB_APP_SECRET_KEYS.installationId]: b64(String(INSTALLATION_ID)), [GITHUB_APP_SECRET_KEYS.privateKey]: b64(keys.privateKey) } });
    await pools.create({
      apiVersion: API_VERSION,
      kind: "ImpVMRunnerPool",
      metadata: { name, namespace: NS },
      spec: {
        templateName: "runner",
        github: { credentialsSecretRef: { name: `${name}-app` }, apiURL: `http://127.0.0.${1 + (i % 250)}:${githubPort}`, scope: "repo", repository: `acme/repo-${i}`, runnerGroup: "Default", labels: ["imp"] },
        minIdle: size,
        maxConcurrent: size,
        scaleUpStep: 100,
        runnerCommand: ["/runner/run.sh"],
      },
    });
  }
  const count = (pred: (s: Seen) => boolean): number => [...seen.values()].filter(pred).length;
  const progress = setInterval(() => log(`${phase}: seen ${seen.size}, bound ${count((s) => s.bound !== undefined)}, minted ${count((s) => s.minted !== undefined)}, running ${count((s) => s.running !== undefined && s.terminal === undefined)}, ended ${count((s) => s.terminal !== undefined)}, gone ${count((s) => s.gone !== undefined)}; operator RSS ${((samples.at(-1)?.rssBytes ?? 0) / 2 ** 20).toFixed(0)} MiB`), 10_000);
  // A phase that does not finish in time is reported as far as it got (marked), not thrown away.
  const incomplete: string[] = [];
  const phaseDone = async (what: string, done: () => boolean): Promise<void> => {
    await waitFor(what, async () => (done() ? true : undefined), { timeoutMs: PHASE_TIMEOUT_MS, intervalMs: 200 }).catch(() => {
      incomplete.push(what);
      log(`NOT DONE within ${PHASE_TIMEOUT_MS / 1000} s: ${what}`);
    });
  };
  await phaseDone(`${VMS} VMs running`, () => count((s) => s.running !== undefined && s.terminal === undefined) >= VMS);
  const fillMs = performance.now() - fillStarted;
  const afterFill = await sampleNow(true);
  const cpuAfterFill = planeCpu();
  log(`fill done in ${(fillMs / 1000).toFixed(1)} s`);

  // Churn: every VM of the fill ends its job, spread over CHURN_SPREAD_MS; the pools replace them.
  phase = "churn";
  const churnStarted = performance.now();
  const firstWave = [...seen.entries()].filter(([, s]) => s.wave === "fill" && s.running !== undefined && s.terminal === undefined).map(([name]) => name);
  firstWave.forEach((name, i) => setTimeout(() => void endJob(name), (i * CHURN_SPREAD_MS) / firstWave.length));
  await phaseDone(`${firstWave.length} replacements running and the ended VMs gone`, () => {
    const replaced = count((s) => s.wave === "churn" && s.running !== undefined && s.terminal === undefined);
    return replaced >= firstWave.length && firstWave.every((name) => seen.get(name)?.gone !== undefined);
  });
  const churnMs = performance.now() - churnStarted;
  const afterChurn = await sampleNow(true);
  const cpuAfterChurn = planeCpu();
  clearInterval(progress);
  child.send({ type: "stop" });
  await waitFor("the operator's report", async () => (report !== undefined ? true : undefined), { timeoutMs: 60_000, intervalMs: 100 });
  await childExit;
  child = undefined;

  // ---- the table ------------------------------------------------------------------------------
  const pct = (values: number[], p: number): number => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
  };
  const ms = (v: number): string => (Number.isNaN(v) ? "-" : `${v.toFixed(0)} ms`);
  const bindOf = (wave: Seen["wave"]): number[] => [...seen.values()].filter((s) => s.wave === wave && s.bound !== undefined).map((s) => s.bound! - s.created);
  const runOf = (wave: Seen["wave"]): number[] => [...seen.values()].filter((s) => s.wave === wave && s.running !== undefined).map((s) => s.running! - s.created);
  const diff = (a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = (b[k] ?? 0) - (a[k] ?? 0);
      if (d !== 0) out[k] = d;
    }
    return out;
  };
  const sum = (o: Record<string, number>, pred: (k: string) => boolean = () => true): number => Object.entries(o).filter(([k]) => pred(k)).reduce((n, [, v]) => n + v, 0);
  const isWrite = (k: string): boolean => /^(POST|PUT|PATCH|DELETE) /.test(k);
  const kubeFill = diff(atStart.kube, afterFill.kube);
  const kubeChurn = diff(afterFill.kube, afterChurn.kube);
  const ghFill = diff(atStart.github, afterFill.github);
  const ghChurn = diff(afterFill.github, afterChurn.github);
  const createdInChurn = count((s) => s.wave === "churn");
  const peakRss = Math.max(...samples.map((s) => s.rssBytes));
  const peakHeap = Math.max(...samples.map((s) => s.heapUsedBytes));
  const quantileOfBuckets = (buckets: ReadonlyArray<readonly [number, number]>, q: number): string => {
    const total = buckets.at(-1)?.[1] ?? 0;
    if (total === 0) return "-";
    const bound = buckets.find(([, n]) => n >= q * total)?.[0] ?? Number.POSITIVE_INFINITY;
    return Number.isFinite(bound) ? `≤ ${bound * 1000} ms` : "> 60 s";
  };

  // GitHub's pacing (one write a second per installation; a pool is an installation here): a fill
  // mints each pool's runners one a second, a churn also removes each one (two writes).
  const fillBoundS = Math.ceil(VMS / POOLS);
  const churnBoundS = 2 * fillBoundS;
  const rows: string[][] = [["metric", "fill", "churn", "target (issue 32), fill / churn"]];
  rows.push(["VMs", `${VMS} created`, `${firstWave.length} ended, ${createdInChurn} created`, ""]);
  rows.push(["wall time", `${(fillMs / 1000).toFixed(1)} s`, `${(churnMs / 1000).toFixed(1)} s (ends spread over ${CHURN_SPREAD_MS / 1000} s)`, `≤ ${2 * fillBoundS} / ${2 * churnBoundS} s (2× GitHub's pacing)`]);
  rows.push(["bind latency p50 / p99", `${ms(pct(bindOf("fill"), 50))} / ${ms(pct(bindOf("fill"), 99))}`, `${ms(pct(bindOf("churn"), 50))} / ${ms(pct(bindOf("churn"), 99))}`, "p99 ≤ 5000 ms"]);
  rows.push(["created → Running p50 / p99", `${ms(pct(runOf("fill"), 50))} / ${ms(pct(runOf("fill"), 99))}`, `${ms(pct(runOf("churn"), 50))} / ${ms(pct(runOf("churn"), 99))}`, `p99 ≤ ${2 * fillBoundS} / ${2 * churnBoundS} s`]);
  rows.push(["VM terminal → replacement bound p50 / p99", "", `${ms(pct(replacementMs, 50))} / ${ms(pct(replacementMs, 99))}`, ""]);
  rows.push(["operator API writes", `${sum(kubeFill, isWrite)} (${(sum(kubeFill, isWrite) / VMS).toFixed(1)} per VM)`, `${sum(kubeChurn, isWrite)} (${(sum(kubeChurn, isWrite) / firstWave.length).toFixed(1)} per lifecycle)`, "≤ 12 per lifecycle"]);
  rows.push(["operator API reads (GET, excluding watches)", `${sum(kubeFill, (k) => k.startsWith("GET "))}`, `${sum(kubeChurn, (k) => k.startsWith("GET "))}`, ""]);
  rows.push(["GitHub requests", `${sum(ghFill)} (${(sum(ghFill) / VMS).toFixed(1)} per VM)`, `${sum(ghChurn)} (${(sum(ghChurn) / firstWave.length).toFixed(1)} per lifecycle)`, ""]);
  rows.push(["simulated agent writes (not the operator's)", "", `${agentWrites} in all`, ""]);
  rows.push(["operator RSS (at start: " + `${(atStart.rssBytes / 2 ** 20).toFixed(0)} MiB)`, `${(afterFill.rssBytes / 2 ** 20).toFixed(0)} MiB`, `${(afterChurn.rssBytes / 2 ** 20).toFixed(0)} MiB (peak ${(peakRss / 2 ** 20).toFixed(0)} MiB)`, "≤ 250 MiB"]);
  rows.push(["operator JS heap used", `${(afterFill.heapUsedBytes / 2 ** 20).toFixed(0)} MiB`, `${(afterChurn.heapUsedBytes / 2 ** 20).toFixed(0)} MiB (peak ${(peakHeap / 2 ** 20).toFixed(0)} MiB)`, ""]);
  const cpuSeconds = (a: OperatorSample, b: OperatorSample): number => (b.cpuMicros - a.cpuMicros) / 1e6;
  rows.push(["operator CPU time", `${cpuSeconds(atStart, afterFill).toFixed(1)} s (${((cpuSeconds(atStart, afterFill) * 1000) / VMS).toFixed(0)} ms per VM)`, `${cpuSeconds(afterFill, afterChurn).toFixed(1)} s (${((cpuSeconds(afterFill, afterChurn) * 1000) / firstWave.length).toFixed(0)} ms per lifecycle)`, ""]);
  // Who else used the 2 cores: a burst here waits for whichever process is short of CPU.
  for (const [name, at] of Object.entries(cpuAtStart)) {
    const fill = (cpuAfterFill[name] ?? at) - at;
    const churn = (cpuAfterChurn[name] ?? at) - (cpuAfterFill[name] ?? at);
    rows.push([`${name} CPU time (share of the wall time)`, `${fill.toFixed(1)} s (${((fill * 100_000) / fillMs).toFixed(0)} %)`, `${churn.toFixed(1)} s (${((churn * 100_000) / churnMs).toFixed(0)} %)`, ""]);
  }
  const live = (m: OperatorSample): string => (m.liveHeapBytes === undefined ? "-" : `${(m.liveHeapBytes / 2 ** 20).toFixed(0)} MiB`);
  rows.push([`operator JS heap live after a full GC (at start: ${live(atStart)})`, live(afterFill), live(afterChurn), ""]);
  for (const [controller, buckets] of Object.entries(report!.reconcile).sort()) {
    const total = buckets.at(-1)?.[1] ?? 0;
    if (total > 0) rows.push([`reconcile ${controller} p50 / p99 (${total})`, "", `${quantileOfBuckets(buckets, 0.5)} / ${quantileOfBuckets(buckets, 0.99)}`, "p99 ≤ 100 ms"]);
  }
  rows.push(["GitHub OpenAPI violations", "", String(github.violations.length), "0"]);
  for (const what of incomplete) rows.push(["NOT DONE in time (figures so far)", "", what, ""]);
  rows.push(["replacements running at the end", "", `${count((s) => s.wave === "churn" && s.running !== undefined && s.terminal === undefined)} of ${firstWave.length}`, ""]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log(`\nbench:operator — ${VMS} VMs, ${NODES} nodes, ${POOLS} pools, operator node flags "${BENCH_NODE_FLAGS.join(" ")}" (whole run, fill and churn, ${((performance.now() - t0) / 1000).toFixed(0)} s)\n`);
  for (const row of rows) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join("  "));
  const breakdown = (title: string, o: Record<string, number>, per: number): void => {
    console.log(`\n${title}`);
    for (const [k, v] of Object.entries(o).filter(([k]) => isWrite(k) || !k.startsWith("WATCH")).sort((a, b) => b[1] - a[1])) console.log(`  ${k.padEnd(48)} ${String(v).padStart(7)}  ${(v / per).toFixed(2)}`);
  };
  breakdown("operator API requests in churn (per lifecycle)", kubeChurn, firstWave.length);
  breakdown("operator GitHub requests in churn (per lifecycle)", ghChurn, firstWave.length);
  if (github.violations.length > 0 || incomplete.length > 0) process.exitCode = 1;
} finally {
  stop.abort();
  child?.kill("SIGKILL");
  await github.stop();
  await plane.stop();
}
