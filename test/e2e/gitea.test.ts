/**
 * A real forge with its real runner: Gitea 1.27.3 and gitea-runner v1.0.8 inside Imp microVMs, on
 * the real runner path (control plane, `imp operator`, two `imp agent`s, registry, QEMU). The
 * scenario (runner-path/gitea-scenario.ts, also `npm run demo -- --forge gitea`): a Gitea pool's VM
 * registers its runner from a sealed `.runner`, a pushed workflow (several steps, an env var, a
 * clone, a local action) runs in it, its log comes from Gitea's API, the VM ends and is replaced.
 */
import { after, before, describe, it } from "node:test";
import { checks } from "./runner-path/scenario.ts";
import { giteaPoolComesOnline, giteaVmReplaced, giteaWorkflowRuns } from "./runner-path/gitea-scenario.ts";
import { giteaWorldUnavailable, RunnerWorld } from "./runner-path/world.ts";

const unavailable = await giteaWorldUnavailable();
if (unavailable !== undefined) process.stdout.write(`# gitea e2e: cannot run on this machine: ${unavailable}\n`);

describe("Gitea Actions end to end: the real runner in a microVM", { skip: unavailable, timeout: 1_200_000 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ gitea: true, say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await world?.dispose();
  });

  it("a pushed workflow runs in a VM with the real gitea-runner; its log is on Gitea; the VM goes and is replaced", async () => {
    const check = checks((what) => process.stdout.write(`# ✓ ${what}\n`));
    const { vm } = await giteaPoolComesOnline(world, check);
    const { log } = await giteaWorkflowRuns(world, vm, check);
    process.stdout.write(log.replace(/^/gm, "#   "));
    await giteaVmReplaced(world, vm, check);
  });
});
