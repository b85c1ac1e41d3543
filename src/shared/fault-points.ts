/**
 * Named fault points: places on the runner path where the failure-proof suite injects a fault
 * deterministically (a crash exactly after a setup is minted, a hang exactly during disk preparation)
 * instead of sleeping and hoping. Production never arms one: a point is a no-op unless the process was
 * given a plan, either in code (`new FaultPoints(plan)`, in-process tests) or through the environment
 * variable below (child processes: `imp agent`, `imp operator`), which nothing but the test suite sets.
 *
 * Plan syntax (the variable's value): `point=action[,point=action…]`, action one of
 *   crash        SIGKILL this very process at the point (a crash there, nothing runs after it)
 *   fail         throw a retryable FaultInjected error at the point
 *   hang         wait at the point until the caller's signal aborts (the step's own timeout must fire)
 *   delay:<ms>   wait that long, then go on
 * Optionally `@N`: only the N-th hit (1-based) of that point acts; earlier and later hits pass.
 * Written here rather than taken from a library: no fault-injection library for Node does named,
 * env-armed points in child processes with a crash action; it is forty lines.
 */
import { retryableError, terminalError } from "./errors.ts";

export const FAULT_POINTS_ENV = "IMP_TEST_FAULT_POINTS";

export type FaultAction = { readonly kind: "crash" } | { readonly kind: "fail" } | { readonly kind: "hang" } | { readonly kind: "delay"; readonly ms: number };

export interface FaultRule {
  readonly point: string;
  readonly action: FaultAction;
  /** Acts only on this hit (1-based); undefined = every hit. */
  readonly onHit?: number;
}

/** Parses a plan; a malformed one is a terminal error, so a typo cannot silently disarm a test's fault. */
export function parseFaultPlan(text: string): FaultRule[] {
  const rules: FaultRule[] = [];
  for (const part of text.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
    const m = /^([A-Za-z][\w.-]*)=(crash|fail|hang|delay:(\d+))(?:@(\d+))?$/.exec(part);
    if (m === null) throw terminalError("FaultPlanInvalid", `Cannot read fault rule "${part}": expected point=crash|fail|hang|delay:<ms>[@N]`);
    const [, point = "", verb = "", ms, hit] = m;
    const action: FaultAction = verb.startsWith("delay") ? { kind: "delay", ms: Number(ms) } : { kind: verb as "crash" | "fail" | "hang" };
    rules.push({ point, action, ...(hit === undefined ? {} : { onHit: Number(hit) }) });
  }
  return rules;
}

export class FaultPoints {
  readonly #rules: readonly FaultRule[];
  readonly #hits = new Map<string, number>();
  /** Called before an action runs (tests observe which point fired; a child logs it before crashing). */
  readonly #onFire: ((point: string, action: FaultAction) => void) | undefined;

  constructor(rules: readonly FaultRule[] = [], onFire?: (point: string, action: FaultAction) => void) {
    this.#rules = rules;
    this.#onFire = onFire;
  }

  /** The plan in `env[FAULT_POINTS_ENV]`, or none. */
  static fromEnv(env: NodeJS.ProcessEnv, onFire?: (point: string, action: FaultAction) => void): FaultPoints {
    const text = env[FAULT_POINTS_ENV];
    return new FaultPoints(text === undefined || text === "" ? [] : parseFaultPlan(text), onFire);
  }

  get armed(): boolean {
    return this.#rules.length > 0;
  }

  /** How often `point` was reached so far (armed or not). */
  hits(point: string): number {
    return this.#hits.get(point) ?? 0;
  }

  /** Marks reaching `point`; acts when a rule for it says so. Cheap and synchronous-looking when unarmed. */
  async hit(point: string, signal?: AbortSignal): Promise<void> {
    const n = (this.#hits.get(point) ?? 0) + 1;
    this.#hits.set(point, n);
    if (this.#rules.length === 0) return;
    const rule = this.#rules.find((r) => r.point === point && (r.onHit === undefined || r.onHit === n));
    if (rule === undefined) return;
    this.#onFire?.(point, rule.action);
    switch (rule.action.kind) {
      case "crash":
        process.kill(process.pid, "SIGKILL");
        // SIGKILL of oneself is delivered before the next instruction returns to user code; never resolve.
        return new Promise<void>(() => undefined);
      case "fail":
        throw retryableError("FaultInjected", `Fault injected at ${point} (test plan)`);
      case "hang":
        return new Promise<void>((_resolve, reject) => {
          if (signal?.aborted === true) return reject(signal.reason as Error);
          signal?.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
        });
      case "delay":
        return new Promise<void>((resolve) => setTimeout(resolve, (rule.action as { ms: number }).ms));
    }
  }
}

/** The unarmed set: every hit passes. */
export const NO_FAULTS = new FaultPoints();
