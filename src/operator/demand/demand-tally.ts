/**
 * Counts demand signals by where they came from and what became of them (the metric
 * imp_operator_demand_signals_total), and records a counted job in the pool's ledger.
 */
import { Counter, type Registry } from "prom-client";
import type { RunnerActivity } from "./runner-activity.ts";

/** What became of each demand signal. */
export const DEMAND_RESULTS = ["counted", "replayed", "stale", "unverified"] as const;
export type DemandResult = (typeof DEMAND_RESULTS)[number];
export type DemandSignal = "webhook" | "listing";

export class DemandTally {
  readonly #counter: Counter;
  readonly #enqueue: (poolKey: string) => void;

  constructor(registry: Registry, enqueue: (poolKey: string) => void) {
    this.#enqueue = enqueue;
    this.#counter = new Counter({ name: "imp_operator_demand_signals_total", help: "Demand signals (queued jobs) by source (webhook, listing) and what became of them: counted, replayed (a job seen taken or completed), stale (the forge says it no longer waits), unverified (the forge could not be asked).", labelNames: ["source", "result"], registers: [registry] });
    for (const source of ["webhook", "listing"]) for (const result of DEMAND_RESULTS) this.#counter.inc({ source, result }, 0);
  }

  note(source: DemandSignal, result: DemandResult): void {
    this.#counter.inc({ source, result });
  }

  /** The job waits for the pool: counted once (a settled or already counted job is a replay), and the pool reconsiders. */
  count(ledger: RunnerActivity, poolKey: string, source: DemandSignal, jobId: number, repository: string, attempt = 1): void {
    if (!ledger.jobQueued(poolKey, jobId, repository, attempt)) {
      this.note(source, "replayed");
      return;
    }
    this.note(source, "counted");
    this.#enqueue(poolKey);
  }
}
