/**
 * What every fault case records, and where: one JSON file per case under the results directory, so
 * cases in different test files (run in parallel processes) never write the same file.
 * `scripts/gen-failure-proof.ts` turns the directory of the last run into docs/failure-proof.md.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";

export type InvariantId = "I1" | "I2" | "I3" | "I4" | "I5" | "I6";

export const INVARIANTS: Readonly<Record<InvariantId, string>> = {
  I1: "A one-time setup is delivered to at most one running process, ever; no runner name is registered twice.",
  I2: "Every ImpVM reaches a terminal phase or is deleted within a bound, whatever fails.",
  I3: "Every GitHub registration made by Imp is removed within a bound after its VM ends.",
  I4: "Nothing sealed to a node (one-time setup, Secret inputs) outlives its VM's run.",
  I5: "No VMM process, tap, socket or disk on a node outlives its ImpVM (checked at the process level).",
  I6: "A VM cannot reach the node's own services, the Kubernetes API or cloud metadata addresses.",
};

export interface InvariantOutcome {
  readonly id: InvariantId;
  readonly held: boolean;
  /** What was checked and what was seen, for a person ("3 VMs, all terminal in ≤ 4.1 s"). */
  readonly detail: string;
  /** Time from the fault to the invariant holding, when it is a bound. */
  readonly withinMs?: number;
}

export interface FaultCaseResult {
  /** Stable id, e.g. "operator-crash-after-mint". */
  readonly id: string;
  /** The test file that ran it (relative to the repo). */
  readonly suite: string;
  readonly injected: string;
  readonly where: string;
  readonly impDid: string;
  readonly invariants: readonly InvariantOutcome[];
  /** Fault → every invariant held, in ms. */
  readonly recoverMs: number;
  readonly passed: boolean;
  readonly at: string;
}

export const RESULTS_DIR = resolve(process.env["IMP_FAULT_RESULTS_DIR"] ?? join(import.meta.dirname, "../../.cache/fault-results"));

export async function recordCase(result: FaultCaseResult): Promise<void> {
  await mkdir(RESULTS_DIR, { recursive: true });
  await writeFile(join(RESULTS_DIR, `${result.id}.json`), `${JSON.stringify(result, null, 2)}\n`);
}
