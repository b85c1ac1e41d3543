/**
 * The operator under test for bench/operator.ts, in a process of its own so that its RSS is its
 * own (not the simulated agents' or the GitHub test server's). Started with fork(); reads its
 * settings from IMP_BENCH_OPERATOR (JSON), counts every HTTP request it sends (undici's diagnostics
 * channel sees both client-node's requests to the API server and octokit's fetch to GitHub), and
 * reports a sample over IPC every second; on "stop" it sends its reconcile histograms and exits.
 */
import { subscribe } from "node:diagnostics_channel";
import { KubeConfig } from "@kubernetes/client-node";
import { Operator } from "../src/operator/index.ts";
import { createLogger } from "../src/shared/index.ts";

interface Settings {
  readonly kubeconfigPath: string;
  readonly namespace: string;
  readonly apiServer: string;
  readonly logLevel: string;
  readonly setupWorkers?: number;
}

export interface OperatorSample {
  readonly type: "sample";
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  /** Heap still in use after a full collection; only in a sample asked for with `gc: true`. */
  readonly liveHeapBytes?: number;
  /** User + system CPU time of the operator process so far. */
  readonly cpuMicros: number;
  /** "METHOD resource[/subresource]" → count, requests to the API server. */
  readonly kube: Readonly<Record<string, number>>;
  /** "METHOD route" → count, requests to GitHub. */
  readonly github: Readonly<Record<string, number>>;
}

export interface OperatorReport {
  readonly type: "report";
  /** controller → [upper bound s, cumulative count][] of imp_controller_reconcile_duration_seconds. */
  readonly reconcile: Readonly<Record<string, ReadonlyArray<readonly [number, number]>>>;
}

const settings = JSON.parse(process.env["IMP_BENCH_OPERATOR"] ?? "{}") as Settings;
const apiOrigin = new URL(settings.apiServer).origin;
const kube: Record<string, number> = {};
const github: Record<string, number> = {};

/** `/apis/imp.dev/v1alpha1/namespaces/ns/impvms/name/status?x` → `impvms/status`; core and cluster-scoped paths alike. */
export function resourceOfPath(path: string): string {
  const parts = path.split("?")[0]!.split("/").filter((p) => p !== "");
  const rest = parts[0] === "api" ? parts.slice(2) : parts.slice(3);
  const afterNs = rest[0] === "namespaces" && rest.length > 2 ? rest.slice(2) : rest;
  const [resource = "?", , sub] = afterNs;
  return sub === undefined ? resource : `${resource}/${sub}`;
}

function githubRoute(path: string): string {
  return path
    .split("?")[0]!
    .replace(/^\/repos\/[^/]+\/[^/]+/, "/repos/{repo}")
    .replace(/\/runners\/\d+$/, "/runners/{id}")
    .replace(/\/installations\/\d+\//, "/installations/{id}/");
}

subscribe("undici:request:create", (message) => {
  const request = (message as { request: { origin?: unknown; method?: unknown; path?: unknown } }).request;
  const origin = String(request.origin ?? "");
  const method = String(request.method ?? "");
  const path = String(request.path ?? "");
  if (origin === apiOrigin) {
    // Watches are GETs with watch=true; count them apart from reads.
    const key = `${method === "GET" && /[?&]watch=(true|1)/.test(path) ? "WATCH" : method} ${resourceOfPath(path)}`;
    kube[key] = (kube[key] ?? 0) + 1;
  } else {
    const key = `${method} ${githubRoute(path)}`;
    github[key] = (github[key] ?? 0) + 1;
  }
});

const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(settings.kubeconfigPath);
const operator = new Operator({
  kubeConfig,
  logger: createLogger({ level: settings.logLevel, name: "operator" }),
  namespace: settings.namespace,
  leaderElection: false,
  identity: "bench",
  ...(settings.setupWorkers === undefined ? {} : { setupWorkers: settings.setupWorkers }),
});
const stop = new AbortController();
const running = operator.start(stop.signal);
running.catch((err: unknown) => {
  process.stderr.write(`operator failed: ${String(err)}\n`);
  process.exit(1);
});

const sample = (collect = false): void => {
  const mem = process.memoryUsage();
  // RSS and heap-in-use include garbage V8 has not collected yet; what the caches and queues
  // really hold is the heap after a full collection (the bench forks this with --expose-gc).
  let liveHeapBytes: number | undefined;
  const gc = (globalThis as { gc?: () => void }).gc;
  if (collect && gc !== undefined) {
    gc();
    liveHeapBytes = process.memoryUsage().heapUsed;
  }
  const cpu = process.cpuUsage();
  process.send?.({ type: "sample", rssBytes: mem.rss, heapUsedBytes: mem.heapUsed, cpuMicros: cpu.user + cpu.system, ...(liveHeapBytes === undefined ? {} : { liveHeapBytes }), kube, github } satisfies OperatorSample);
};
const timer = setInterval(() => sample(), 1_000);
sample();

process.on("message", (message: unknown) => {
  const { type, gc } = message as { type?: string; gc?: boolean };
  if (type === "sample") return sample(gc === true);
  if (type !== "stop") return;
  void (async () => {
    clearInterval(timer);
    sample();
    const metrics = await operator.registry.getMetricsAsJSON();
    const histogram = metrics.find((m) => m.name === "imp_controller_reconcile_duration_seconds");
    const reconcile: Record<string, Array<readonly [number, number]>> = {};
    for (const v of (histogram?.values ?? []) as Array<{ metricName?: string; labels: Record<string, string | number>; value: number }>) {
      if (v.metricName !== "imp_controller_reconcile_duration_seconds_bucket") continue;
      const controller = String(v.labels["controller"]);
      const le = v.labels["le"] === "+Inf" ? Number.POSITIVE_INFINITY : Number(v.labels["le"]);
      (reconcile[controller] ??= []).push([le, v.value]);
    }
    // Buckets of several label sets (outcomes) of one controller add up per bound.
    for (const [controller, buckets] of Object.entries(reconcile)) {
      const sums = new Map<number, number>();
      for (const [le, n] of buckets) sums.set(le, (sums.get(le) ?? 0) + n);
      reconcile[controller] = [...sums.entries()].sort((a, b) => a[0] - b[0]);
    }
    process.send?.({ type: "report", reconcile } satisfies OperatorReport, () => {
      stop.abort();
      void running.finally(() => process.exit(0));
      setTimeout(() => process.exit(0), 10_000).unref();
    });
  })();
});
