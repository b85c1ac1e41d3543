import { describeError } from "./errors.ts";
import type { Logger } from "./logger.ts";

/**
 * Boot and teardown as lists of named steps. Each step may register cleanups for what it acquired,
 * at the moment it acquired it; when a later step fails (or the run is aborted) the cleanups run in
 * reverse order, so a failed boot leaves nothing behind. Modeled on the handler lists of
 * firecracker-go-sdk, with cleanup registration at acquisition instead of a separate undo list.
 */
export interface StepContext {
  readonly signal: AbortSignal;
  /** Registers `undo` to run (in reverse order of registration) if the run fails or is rolled back. */
  onCleanup(name: string, undo: () => Promise<void> | void): void;
}

/** One named step; `N` narrows its name to a driver's or a pipeline's own list of step names. */
export interface Step<S, N extends string = string> {
  readonly name: N;
  run(state: S, context: StepContext): Promise<void> | void;
}

export interface StepTiming {
  readonly step: string;
  readonly ms: number;
}

export interface StepRun {
  /** How long each step that ran took, in order. */
  readonly timings: readonly StepTiming[];
  /** Runs every registered cleanup in reverse order; errors are logged, never thrown. Idempotent. */
  rollback(): Promise<void>;
}

/**
 * Runs `steps` in order. On success returns the timings and a rollback for later teardown. On
 * failure runs the cleanups registered so far, then rethrows the step's own error (classified errors
 * keep their class); `onFailure` learns which step it was.
 */
export async function runSteps<S, N extends string = string>(
  steps: readonly Step<S, N>[],
  state: S,
  options: { readonly signal?: AbortSignal; readonly logger?: Logger; readonly now?: () => number; readonly onFailure?: (step: N, err: unknown) => void },
): Promise<StepRun> {
  const now = options.now ?? (() => performance.now());
  const signal = options.signal ?? new AbortController().signal;
  const cleanups: { readonly name: string; readonly undo: () => Promise<void> | void }[] = [];
  const timings: StepTiming[] = [];
  let rolledBack: Promise<void> | undefined;
  const rollback = (): Promise<void> => {
    rolledBack ??= (async () => {
      for (const { name, undo } of cleanups.splice(0).reverse()) {
        try {
          await undo();
        } catch (err) {
          options.logger?.warn({ cleanup: name, error: describeError(err) }, "cleanup failed");
        }
      }
    })();
    return rolledBack;
  };
  const context: StepContext = {
    signal,
    onCleanup: (name, undo) => {
      cleanups.push({ name, undo });
    },
  };
  for (const step of steps) {
    const started = now();
    try {
      signal.throwIfAborted();
      await step.run(state, context);
    } catch (err) {
      options.onFailure?.(step.name, err);
      options.logger?.debug({ step: step.name, error: describeError(err) }, "step failed; rolling back");
      await rollback();
      throw err;
    }
    timings.push({ step: step.name, ms: now() - started });
  }
  return { timings, rollback };
}
