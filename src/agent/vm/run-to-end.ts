/**
 * One VM from its first step to its end, for every way a VM comes to life (the agent's boot, its
 * re-adoption after a restart, `imp run`): run the lifecycle's pipeline to a delivered workload,
 * follow the workload to its end, and roll back what the pipeline acquired. A failed pipeline has
 * already rolled back its own steps (`runSteps`); `failed` turns that failure into the VM's outcome.
 */
import type { Logger, StepRun } from "../../shared/index.ts";
import type { BootStepName, Delivered } from "./boot-steps.ts";
import { followToEnd, type FollowOptions } from "./follow.ts";
import type { VmOutcome } from "./local-vm.ts";
import { explainVmmDeath } from "./outcome.ts";
import type { Pipeline, PipelineRunOptions } from "./pipeline.ts";

export interface RunToEndOptions {
  /** Aborts the pipeline and the follow when the VM is stopped. */
  readonly signal: AbortSignal;
  readonly log: Logger;
  readonly onStep?: PipelineRunOptions<BootStepName>["onStep"];
  /** The outcome of a pipeline that failed in `step` (undefined: before any step); throwing makes runToEnd throw. */
  readonly failed: (step: BootStepName | undefined, err: unknown) => Promise<VmOutcome> | VmOutcome;
  /** The workload runs (or was adopted): called once with it and the pipeline's rollback, before the follow. */
  readonly delivered?: (vm: Delivered, run: StepRun) => void;
  readonly follow: Omit<FollowOptions, "signal" | "log">;
  /**
   * Roll the pipeline back once the workload ended (`imp run`). Without it the rollback is the
   * caller's, which holds it from `delivered` (the node agent releases a VM when its decision says so).
   */
  readonly rollbackAtEnd?: boolean;
}

/** How long the VMM's exit may take to be known once the follow ended (it has gone by then). */
const VMM_EXIT_WAIT_MS = 1_000;

export async function runToEnd<In extends object>(pipeline: Pipeline<In, Delivered, BootStepName>, input: In, o: RunToEndOptions): Promise<VmOutcome> {
  let failedStep: BootStepName | undefined;
  let result: Awaited<ReturnType<typeof pipeline.run>>;
  try {
    result = await pipeline.run(input, { signal: o.signal, logger: o.log, onStep: o.onStep, onFailure: (step) => (failedStep = step) });
  } catch (err) {
    return o.failed(failedStep, err);
  }
  try {
    o.delivered?.(result.output, result.run);
    const { vm } = result.output;
    const outcome = await followToEnd(result.output, { ...o.follow, signal: o.signal, log: o.log });
    // The follow ends with the VMM gone (it powered off or was stopped): how it went may say more.
    const vmmExit = await Promise.race([vm.exited(), new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), VMM_EXIT_WAIT_MS).unref())]);
    return explainVmmDeath(outcome, vmmExit);
  } finally {
    if (o.rollbackAtEnd === true) await result.run.rollback();
  }
}
