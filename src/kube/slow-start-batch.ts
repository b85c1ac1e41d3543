/**
 * Many independent API calls of one reconcile (a pool's replacements, its ended VMs' deletes) in
 * parallel batches that start at one call and double, up to `maxBatch`, stopping after the first
 * batch in which a call failed: Kubernetes' ReplicaSet controller does the same (`slowStartBatch`).
 * In series, 20 creates held a pool's reconcile 1–3 s on a loaded API server while the pool's
 * other work waited (bench:operator); all at once, a request the API server refuses for every call
 * (quota, admission, a webhook down) would be sent `count` times instead of once.
 *
 * Each call records its own success (e.g. the expectation of a created VM); a failed batch's
 * successes stand. Returns how many calls succeeded and the first error, if any, so the caller can
 * still report what was done before it throws.
 */
export interface BatchOutcome {
  readonly succeeded: number;
  readonly error?: unknown;
}

export async function slowStartBatch<T>(items: readonly T[], maxBatch: number, call: (item: T) => Promise<void>): Promise<BatchOutcome> {
  if (!(maxBatch >= 1)) throw new RangeError(`slowStartBatch: maxBatch must be at least 1, not ${maxBatch}`);
  let succeeded = 0;
  let size = 1;
  for (let next = 0; next < items.length; ) {
    const batch = items.slice(next, next + size);
    next += batch.length;
    // A call that throws before returning its promise fails like one that rejects.
    const settled = await Promise.allSettled(batch.map(async (item) => call(item)));
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
    succeeded += settled.length - settled.filter((s) => s.status === "rejected").length;
    if (failed !== undefined) return { succeeded, error: failed.reason };
    size = Math.min(Math.floor(maxBatch), size * 2);
  }
  return { succeeded };
}

/** `count` calls of `call(i)`, i = 0 … count − 1, as `slowStartBatch`. */
export function slowStartTimes(count: number, maxBatch: number, call: (i: number) => Promise<void>): Promise<BatchOutcome> {
  return slowStartBatch(
    Array.from({ length: Math.max(0, count) }, (_, i) => i),
    maxBatch,
    call,
  );
}
