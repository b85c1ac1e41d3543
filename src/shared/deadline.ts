import { classOf, retryableError } from "./errors.ts";

/**
 * Every wait in Imp has a timeout. `withDeadline` runs `fn` with a signal that aborts after `ms`
 * (or when `parent` aborts) and turns the timeout into a retryable error naming what timed out.
 */
export async function withDeadline<T>(
  what: string,
  ms: number,
  fn: (signal: AbortSignal) => Promise<T>,
  parent?: AbortSignal,
): Promise<T> {
  const timeout = AbortSignal.timeout(ms);
  const signal = parent === undefined ? timeout : AbortSignal.any([timeout, parent]);
  try {
    return await fn(signal);
  } catch (err) {
    if (timeout.aborted && !(parent?.aborted ?? false)) {
      throw retryableError("Timeout", `Cannot ${what}: no result within ${ms} ms`, { cause: err });
    }
    throw err;
  }
}

/**
 * Polls `check` every `intervalMs` until it returns a value other than undefined, or times out.
 * An error thrown by `check` counts as "not yet" unless it is classified terminal: then waiting
 * cannot help, and it is rethrown at once (e.g. the process being waited for has exited).
 */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  options: { readonly timeoutMs: number; readonly intervalMs?: number; readonly signal?: AbortSignal },
): Promise<T> {
  const interval = options.intervalMs ?? 100;
  return withDeadline(
    what,
    options.timeoutMs,
    async (signal) => {
      let lastError: unknown;
      while (!signal.aborted) {
        try {
          const value = await check();
          if (value !== undefined) return value;
        } catch (err) {
          if (classOf(err) === "terminal") throw err;
          lastError = err;
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, interval);
          signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
        });
      }
      throw new Error(`gave up waiting${lastError === undefined ? "" : ` (last error: ${String(lastError)})`}`, { cause: lastError });
    },
    options.signal,
  );
}
