/**
 * A VM's lifecycle as one typed list of named steps. Each step receives the products of the steps
 * before it and returns its own, which the next steps receive: a step that needs the guest channel
 * cannot be placed before the step that opens it, and no step checks for "missing" state that the
 * types already rule out. Cleanups are registered as each resource is acquired (`StepContext.onCleanup`)
 * and run in reverse on failure, abort or rollback (`runSteps`). The agent's boot, its re-adoption
 * after a restart and `imp run` are compositions of the same steps (`lifecycle.ts`).
 */
import { runSteps, type Logger, type Step, type StepContext, type StepRun } from "../../shared/index.ts";

export type { StepContext } from "../../shared/index.ts";

/** One step: its name and what it adds to the state, from what the steps before it produced. */
export type StepFn<S, A> = (state: S, context: StepContext) => Promise<A> | A;

export interface PipelineRunOptions<N extends string = string> {
  readonly signal?: AbortSignal;
  readonly logger?: Logger;
  /** Called as each step begins and ends (the runtime maps step names onto a VM's stages). */
  readonly onStep?: ((name: N, event: "begin" | "end") => void) | undefined;
  /** Called once with the step that failed, before its cleanups run. */
  readonly onFailure?: (step: N, err: unknown) => void;
}

export interface PipelineResult<Out> {
  readonly output: Out;
  readonly run: StepRun;
}

type AnyStep<N extends string> = Step<Record<string, unknown>, N>;

/** `N` names the steps a pipeline may hold (the VM lifecycle's: `BootStepName`), so every `onStep` and failure names one of them. */
export class Pipeline<In extends object, Out extends object, N extends string = string> {
  readonly #steps: readonly AnyStep<N>[];

  private constructor(steps: readonly AnyStep<N>[]) {
    this.#steps = steps;
  }

  /** An empty pipeline whose state starts as `In`. */
  static of<In extends object, N extends string = string>(): Pipeline<In, In, N> {
    return new Pipeline<In, In, N>([]);
  }

  /** Adds a step; what it returns is merged into the state of the steps after it. */
  step<A extends object>(name: N, run: StepFn<Out, A>): Pipeline<In, Out & A, N> {
    const step: AnyStep<N> = {
      name,
      run: async (state, context) => {
        Object.assign(state, await run(state as unknown as Out, context));
      },
    };
    return new Pipeline<In, Out & A, N>([...this.#steps, step]);
  }

  /** Appends `next`, whose input this pipeline's output satisfies. */
  then<X extends object, B extends object>(next: Out extends X ? Pipeline<X, B, N> : never): Pipeline<In, Out & B, N> {
    return new Pipeline<In, Out & B, N>([...this.#steps, ...(next as Pipeline<X, B, N>).#steps]);
  }

  /** The step names in order (docs, logs, tests). */
  get names(): readonly N[] {
    return this.#steps.map((s) => s.name);
  }

  /**
   * Runs the steps in order on a copy of `input`. On failure the cleanups registered so far run in
   * reverse and the step's own error is rethrown; on success the result carries the rollback for
   * later teardown.
   */
  async run(input: In, options: PipelineRunOptions<N> = {}): Promise<PipelineResult<Out>> {
    const state = { ...input } as Record<string, unknown>;
    const steps: AnyStep<N>[] = this.#steps.map((s) => ({
      name: s.name,
      run: async (st, ctx) => {
        options.onStep?.(s.name, "begin");
        await s.run(st, ctx);
        options.onStep?.(s.name, "end");
      },
    }));
    const run = await runSteps(steps, state, {
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
      ...(options.onFailure === undefined ? {} : { onFailure: options.onFailure }),
    });
    return { output: state as unknown as Out, run };
  }
}
