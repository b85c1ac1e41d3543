import { classOf, type ErrorClass } from "../shared/index.ts";
import type { ReconcileOutcome } from "./controller-metrics.ts";

/** What a reconcile returns. The loop owns every timer; reconcilers never sleep. */
export type ReconcileResult = { readonly kind: "done" } | { readonly kind: "requeueAfter"; readonly ms: number };

export const done: ReconcileResult = { kind: "done" };
export const requeueAfter = (ms: number): ReconcileResult => ({ kind: "requeueAfter", ms });

/** What the loop does with the key after one reconcile. */
export type QueueAction =
  | { readonly kind: "forget" }
  | { readonly kind: "forgetAndAddAfter"; readonly ms: number }
  | { readonly kind: "addRateLimited" };

export type ReconcileAttempt = { readonly ok: true; readonly result: ReconcileResult } | { readonly ok: false; readonly error: unknown };

export interface RequeueDecision {
  readonly outcome: ReconcileOutcome;
  readonly action: QueueAction;
}

/**
 * The loop's whole error policy, pure: success forgets the key's backoff; requeueAfter
 * forgets it and schedules a fresh look; a terminal error forgets it (retrying cannot help; the
 * next watch event brings the key back); anything else, conflicts included, backs off per key.
 *
 * Conflicts are NOT retried at once here: the immediate re-read-and-retry of a conflict lives in
 * one place, `mutateWithRetry` (a few attempts, each with a fresh GET). A conflict that still
 * reaches the loop means that layer gave up (a hot object, or a write made without it), so the
 * loop treats it like any other failure instead of multiplying the retries.
 */
export function decideRequeue(attempt: ReconcileAttempt): RequeueDecision {
  if (attempt.ok) {
    const { result } = attempt;
    switch (result.kind) {
      case "done":
        return { outcome: "success", action: { kind: "forget" } };
      case "requeueAfter":
        return { outcome: "requeue_after", action: { kind: "forgetAndAddAfter", ms: Math.max(0, result.ms) } };
    }
  }
  const errorClass: ErrorClass = classOf(attempt.error);
  switch (errorClass) {
    case "terminal":
      return { outcome: "terminal", action: { kind: "forget" } };
    case "conflict":
      return { outcome: "conflict", action: { kind: "addRateLimited" } };
    case "retryable":
      return { outcome: "error", action: { kind: "addRateLimited" } };
  }
}
