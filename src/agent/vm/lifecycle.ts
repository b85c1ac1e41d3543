/**
 * The VM lifecycles, each one list of the steps in `boot-steps.ts`:
 *
 *   boot   vm-dir → image → disks → network → vmm → guest → configure → setup → exec
 *   adopt  adopt → guest → follow                       (an agent restarted; nothing is sent again)
 *
 * The node agent runs both; `imp run` runs the boot with its own ports (no network, no setup,
 * direct children, streamed output). After either, `followToEnd` waits for the workload's end.
 */
import type { VmmProcess } from "../vmm/index.ts";
import { adoptSteps, configureSteps, connectSteps, followSteps, launchSteps, prepareSteps, workloadSteps, type AdoptionFacts, type BootDeps } from "./boot-steps.ts";

export function bootPipeline(deps: BootDeps) {
  return prepareSteps(deps)
    .then(launchSteps(deps))
    .then(connectSteps(deps, { timeoutMs: deps.timeouts.bootMs, faultPoint: true }))
    .then(configureSteps(deps))
    .then(workloadSteps(deps));
}

export function adoptPipeline(deps: BootDeps, facts: AdoptionFacts, processes: readonly VmmProcess[]) {
  return adoptSteps(deps, facts, processes)
    .then(connectSteps(deps, { timeoutMs: deps.timeouts.requestMs, faultPoint: false }))
    .then(followSteps(deps));
}
