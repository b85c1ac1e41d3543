/**
 * The demo behind `npm run demo`: one CI job in one microVM, the whole runner path on real parts
 * (test/e2e/runner-path/world.ts): a local control plane, `imp operator`, two `imp agent`s on two
 * simulated nodes, a real OCI registry, real QEMU booting the guest kernel with the guest agent, and
 * the GitHub test server in place of GitHub (these machines cannot reach GitHub).
 *
 * Each step prints what it did, how long it took, and the checks that held; the first check that
 * does not hold ends the demo with exit code 1. Everything it started is removed at the end, also on
 * failure or Ctrl-C. test/e2e/demo.test.ts runs this demo in CI and checks its output.
 *
 *   node scripts/demo.ts                  GitHub (its test server), the pool in scale-set mode
 *   node scripts/demo.ts --forge gitea    a real Gitea 1.27.3 and the real gitea-runner in the VMs
 *                                         (test/e2e/gitea.test.ts runs the same scenario)
 */
import { parseArgs } from "node:util";
import { formatJobTimeline } from "../src/operator/index.ts";
import { checks, isolatedJobs, jobRuns, poolComesOnline, replacementOnline, timelineOf, vmCleanedUp, POOL } from "../test/e2e/runner-path/scenario.ts";
import { giteaPoolComesOnline, giteaVmReplaced, giteaWorkflowRuns } from "../test/e2e/runner-path/gitea-scenario.ts";
import { giteaWorldUnavailable, NAMESPACE, nameOf, RunnerWorld, worldUnavailable } from "../test/e2e/runner-path/world.ts";

const { values: args } = parseArgs({ options: { forge: { type: "string", default: "github" } } });
if (args.forge !== "github" && args.forge !== "gitea") {
  process.stdout.write(`demo: --forge is github or gitea, not ${args.forge}\n`);
  process.exit(2);
}
const forge = args.forge;

const bold = (s: string): string => (process.stdout.isTTY || process.env["IMP_DEMO_COLOR"] === "1" ? `\x1b[1m${s}\x1b[0m` : s);
const out = (line: string): void => void process.stdout.write(`${line}\n`);
const started = Date.now();
const steps: Array<{ step: string; ms: number }> = [];

async function step<T>(title: string, body: () => Promise<T>): Promise<T> {
  out("");
  out(bold(`== ${title}`));
  const t0 = Date.now();
  const result = await body();
  const ms = Date.now() - t0;
  steps.push({ step: title, ms });
  out(`   (${(ms / 1000).toFixed(1)} s)`);
  return result;
}

const why = forge === "gitea" ? await giteaWorldUnavailable() : await worldUnavailable();
if (why !== undefined) {
  out(`demo: cannot run on this machine: ${why}`);
  process.exit(1);
}

const check = checks((what) => out(`   ✓ ${what}`));
let world: RunnerWorld | undefined;
const onSignal = (): void => {
  void (world?.dispose() ?? Promise.resolve()).finally(() => process.exit(130));
};
process.once("SIGINT", onSignal).once("SIGTERM", onSignal);

let failed = false;
try {
  if (forge === "gitea") {
    world = await step("Start the world: control plane, registry, a real Gitea, imp operator, two imp agents", () => RunnerWorld.start({ gitea: true, say: (line) => out(`   ${line}`) }));
    const w = world;
    const { vm } = await step("1. kubectl apply a Gitea runner pool (minIdle 1): a VM boots, gets its sealed .runner, the real gitea-runner comes online on Gitea", async () => {
      const r = await giteaPoolComesOnline(w, check);
      out(`   $ kubectl apply -f gitea-pool.yaml\n   ${r.applied.trim()}`);
      out(indent(await w.kubectl(["-n", NAMESPACE, "get", "impvmrunnerpool,impvm", "-o", "wide"])));
      return r;
    });
    await step("2. Push a workflow (several steps, an env var, a clone, a local action): it runs in the VM; its log comes from Gitea's API", async () => {
      const r = await giteaWorkflowRuns(w, vm, check);
      out(indent(`job log (as Gitea serves it):\n${r.log.replace(/^\S+Z /gm, "")}`));
      return r;
    });
    await step("3. The runner exits: the VM ends, its registration and Secret go, a replacement comes online", () => giteaVmReplaced(w, vm, check));
  } else {
    world = await step("Start the world: control plane, registry, GitHub test server, imp operator, two imp agents", () => RunnerWorld.start({ say: (line) => out(`   ${line}`) }));
    const w = world;
    const { vm } = await step("1. kubectl apply a runner pool (minIdle 1, scale-set mode): the operator creates the runner scale set and listens; a VM boots, gets its sealed one-time setup, its runner comes online", async () => {
      const r = await poolComesOnline(w, check);
      out(`   $ kubectl apply -f pool.yaml\n   ${r.applied.trim()}`);
      out(indent(await w.kubectl(["-n", NAMESPACE, "get", "impvmrunnerpool,impvm", "-o", "wide"])));
      return r;
    });
    const job = await step("2. Queue a harmless job: it runs inside the VM, its log reaches GitHub", async () => {
      const j = await jobRuns(w, vm, check);
      out(indent(`job log (as GitHub shows it):\n${j.result?.log ?? ""}`));
      return j;
    });
    const ended = await step("3. The runner exits: the VM ends Succeeded, its registration and Secret go, nothing of it stays on the node", () => vmCleanedUp(w, vm, check));
    const replacement = await step("4. A replacement VM boots and comes online", () => replacementOnline(w, ended, check));
    out("");
    out(indent(formatJobTimeline(timelineOf(w, job, nameOf(vm), replacement)).join("\n")));
    const round = await step("5. Three jobs at once: separate VMs over both nodes, none sees another's files or network", async () => {
      const r = await isolatedJobs(w, check);
      out(indent(await w.kubectl(["-n", NAMESPACE, "get", "impvm", "-o", "wide"])));
      return r;
    });
    for (const j of round.jobs) {
      const runner = j.runnerName ?? "";
      out("");
      out(indent(formatJobTimeline(timelineOf(w, j, runner)).join("\n")));
    }
  }
  out("");
  out(bold("== Summary"));
  for (const s of steps) out(`   ${(s.ms / 1000).toFixed(1).padStart(6)} s  ${s.step}`);
  out(`   ${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s  total; ${check.held.length} checks held; forge ${forge}, pool ${forge === "gitea" ? "gitea" : POOL}, kernel: ${world.kernelLabel}`);
} catch (err) {
  failed = true;
  out("");
  out(bold(`demo FAILED: ${(err as Error).message}`));
} finally {
  if (world !== undefined) {
    const left = await world.dispose();
    if (left.length === 0) out("   stopped everything the demo started: no namespace, link, process or cgroup of it is left");
    else {
      failed = true;
      out(bold(`demo FAILED: left on the machine: ${left.join(", ")}`));
    }
  }
}
process.exit(failed ? 1 : 0);

function indent(text: string): string {
  return text.trimEnd().replace(/^/gm, "   ");
}
