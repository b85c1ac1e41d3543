import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** Outcomes counted per reconcile. */
export const RECONCILE_RESULTS = ["success", "requeue_after", "conflict", "error", "terminal"] as const;
export type ReconcileOutcome = (typeof RECONCILE_RESULTS)[number];

export interface ControllerMetrics {
  readonly reconcileTotal: Counter<"controller" | "result">;
  readonly reconcileDuration: Histogram<"controller">;
  readonly queueDepth: Gauge<"controller">;
}

const NAMES = {
  total: "imp_controller_reconcile_total",
  duration: "imp_controller_reconcile_duration_seconds",
  depth: "imp_controller_queue_depth",
} as const;

/** Queue depth providers per registry, read at scrape time. */
const depthSources = new WeakMap<Registry, Map<string, () => number>>();

/**
 * Registers (once per registry) and returns the controller metrics, with every result label of
 * `controller` pre-created at zero so dashboards see the series before the first reconcile.
 * `depth` is read at scrape time.
 */
export function controllerMetrics(
  registry: Registry,
  { controller, depth }: { readonly controller: string; readonly depth: () => number },
): ControllerMetrics {
  let sources = depthSources.get(registry);
  if (sources === undefined) {
    sources = new Map();
    depthSources.set(registry, sources);
  }
  sources.set(controller, depth);
  const readDepth = sources;

  const reconcileTotal =
    (registry.getSingleMetric(NAMES.total) as Counter<"controller" | "result"> | undefined) ??
    new Counter({
      name: NAMES.total,
      help: "Reconciles by controller and result.",
      labelNames: ["controller", "result"],
      registers: [registry],
    });
  const reconcileDuration =
    (registry.getSingleMetric(NAMES.duration) as Histogram<"controller"> | undefined) ??
    new Histogram({
      name: NAMES.duration,
      help: "Time spent in one reconcile.",
      labelNames: ["controller"],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
  const queueDepth =
    (registry.getSingleMetric(NAMES.depth) as Gauge<"controller"> | undefined) ??
    new Gauge({
      name: NAMES.depth,
      help: "Keys ready in the work queue.",
      labelNames: ["controller"],
      registers: [registry],
      collect() {
        for (const [name, read] of readDepth) this.labels(name).set(read());
      },
    });
  for (const result of RECONCILE_RESULTS) reconcileTotal.labels(controller, result).inc(0);
  reconcileDuration.zero({ controller });
  queueDepth.labels(controller).set(depth());
  return { reconcileTotal, reconcileDuration, queueDepth };
}
