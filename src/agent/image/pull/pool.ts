import { terminalError } from "../../../shared/index.ts";

/**
 * Runs `fn` over `items` with at most `limit` in flight, preserving result order. The first failure
 * aborts the signal handed to the others and is the error thrown (once all running calls settled, so
 * no work outlives the call).
 */
export async function mapBounded<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, signal: AbortSignal) => Promise<R>,
  parent?: AbortSignal,
): Promise<R[]> {
  if (!Number.isInteger(limit) || limit < 1) throw terminalError("PullConfigInvalid", `Cannot pull with concurrency ${limit}: need a positive integer`);
  const controller = new AbortController();
  const signal = parent === undefined ? controller.signal : AbortSignal.any([parent, controller.signal]);
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  let firstError: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (firstError === undefined && !signal.aborted && next < items.length) {
      const index = next++;
      try {
        results[index] = await fn(items[index] as T, signal);
      } catch (error) {
        if (firstError === undefined) firstError = { error };
        controller.abort(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (firstError !== undefined) throw firstError.error;
  parent?.throwIfAborted();
  return results;
}
