/**
 * The end-to-end scenario, step by step, on a RunnerWorld. Each step acts, waits for the system to
 * get there, and checks what a platform team would check by hand (kubectl, GitHub, the node's host)
 * through `check`, which throws at the first check that does not hold. The README demo
 * (scripts/demo.ts) prints the steps; its test (test/e2e/demo.test.ts) runs it in CI.
 */
import type { ImpVM } from "../../../src/api/index.ts";
import { formatJobTimeline, jobTimeline, type JobTimeline } from "../../../src/operator/index.ts";
import type { TestJob } from "../../github/server.ts";
import type { Stored } from "../../../src/kube/index.ts";
import { helloSteps, isolationSteps, parseIsolation } from "./jobs.ts";
import { nameOf, type RunnerWorld } from "./world.ts";

export const POOL = "linux";
/** The demo's pool is in scale-set mode: its scale set is named like the pool, and jobs say `runs-on: linux`. */
export const JOB_LABELS: readonly string[] = [POOL];

export interface Checks {
  /** Throws `CheckFailed: <what>` unless `ok`; otherwise records `what` as held. */
  (ok: boolean, what: string, detail?: string): void;
  readonly held: string[];
}

export function checks(onHeld: (what: string) => void = () => undefined): Checks {
  const held: string[] = [];
  const check = ((ok: boolean, what: string, detail?: string): void => {
    if (!ok) throw new Error(`CheckFailed: ${what}${detail === undefined ? "" : `\n${detail}`}`);
    held.push(what);
    onHeld(what);
  }) as Checks;
  Object.defineProperty(check, "held", { value: held });
  return check;
}

/** A runner VM that is Running with its setup delivered and whose runner is online with GitHub. */
function onlineRunner(world: RunnerWorld, vms: ImpVM[], except: ReadonlySet<string>): ImpVM | undefined {
  return vms.find((vm) => !except.has(nameOf(vm)) && vm.status?.phase === "Running" && world.github.runnerNamed(nameOf(vm))?.status === "online");
}

/**
 * Step 1: `kubectl apply` a pool with minIdle 1 in scale-set mode: the operator creates the runner
 * scale set and listens to it (no inbound webhook); a VM is bound, boots, receives its sealed setup;
 * its runner comes online.
 */
export async function poolComesOnline(world: RunnerWorld, check: Checks): Promise<{ applied: string; vm: ImpVM }> {
  const applied = await world.applyPool(POOL, { minIdle: 1, maxConcurrent: 4, scaleSet: true });
  check(/impvmrunnerpool\.imp\.dev\/linux (created|configured)/.test(applied), "kubectl applied the runner pool", applied);
  const set = await world.waitUntil("the pool's scale set listened to", () => {
    const found = world.github.actions.scaleSetNamed(POOL);
    return found?.session !== undefined ? found : undefined;
  }, 120_000);
  check(set.session?.ownerName !== undefined, `the operator created runner scale set ${POOL} (id ${set.id}) and holds its message session`);
  const vm = await world.waitForVm("a runner VM online", (vms) => onlineRunner(world, vms, new Set()));
  const status = vm.status ?? {};
  check(world.nodes.some((n) => n.name === status.nodeName), `VM ${nameOf(vm)} is bound to node ${status.nodeName ?? "?"}`);
  check(status.setup?.state === "Delivered", "its one-time setup was delivered to the guest", JSON.stringify(status.setup));
  check(status.runner?.name === nameOf(vm), `its runner is registered with GitHub as ${nameOf(vm)} (id ${status.runner?.id ?? "?"})`);
  const runner = world.github.runnerNamed(nameOf(vm));
  check(runner?.setupUsed === true && runner.status === "online", "the runner came online with its one-time setup");
  const stored = JSON.stringify(await world.getVm(nameOf(vm)));
  check(runner !== undefined && /"sealed":/.test(stored) && !stored.includes(runner.secret), "the VM's status holds only the sealed setup, not the credential");
  const leaked = [world.operator, ...world.nodes.map((n) => n.agent)].filter((p) => runner !== undefined && p.log().includes(runner.secret));
  check(leaked.length === 0, "no operator or agent log contains the setup", leaked.map((p) => p.name).join(", "));
  return { applied, vm };
}

/** Step 2: a harmless job runs inside the VM; its log reaches GitHub. */
export async function jobRuns(world: RunnerWorld, vm: ImpVM, check: Checks): Promise<TestJob> {
  const job = world.queueJob("hello", helloSteps(), JOB_LABELS);
  await world.waitForJob(job, "completed");
  const log = job.result?.log ?? "";
  check(job.runnerName === nameOf(vm), `the idle runner ${nameOf(vm)} took the job`, job.runnerName);
  check(job.conclusion === "success", "the job succeeded", log);
  check(/hello from \S+, kernel \S+, 1 vCPU/.test(log) && /step 3\ndone/.test(log), "its output is in the job log on GitHub", log);
  return job;
}

/** Step 3: the runner exits; the VM Succeeded; registration, sealed setup and everything on the node are gone. */
export async function vmCleanedUp(world: RunnerWorld, vm: ImpVM, check: Checks): Promise<ImpVM> {
  const name = nameOf(vm);
  const uid = vm.metadata.uid ?? "";
  const node = world.nodeOf(vm);
  await world.waitUntil(`${name} Succeeded`, () => (world.history(name)?.phases.includes("Succeeded") === true ? true : undefined), 180_000, 100);
  const last = world.history(name)?.last ?? vm;
  check(last.status?.exitCode === 0, `VM ${name} ended Succeeded with exit code 0`, JSON.stringify(last.status));
  await world.waitUntil(`${name} deleted`, async () => ((await world.getVm(name)) === undefined ? true : undefined), 180_000);
  const final = world.history(name)?.last ?? last;
  check(world.github.runnerNamed(name) === undefined, "no runner of that name is registered with GitHub");
  check(final.status?.setup?.state === "Deleted" && final.status.setup.sealed === undefined, "its sealed setup left its status before it went", JSON.stringify(final.status?.setup));
  const left = await world.waitUntil(`nothing of ${name} on ${node.name}`, async () => ((await world.leftoversOf(node, uid)).length === 0 ? [] : undefined), 60_000, 500).catch(async () => world.leftoversOf(node, uid));
  check(left.length === 0, `nothing of it remains on ${node.name}: no process, socket, tap, cgroup or disk`, left.join("\n"));
  return final;
}

/** Step 4: a replacement VM boots and its runner comes online. */
export async function replacementOnline(world: RunnerWorld, first: ImpVM, check: Checks): Promise<Stored<ImpVM>> {
  const replacement = await world.waitForVm("a replacement runner online", (vms) => onlineRunner(world, vms, new Set([nameOf(first)])));
  check(replacement.metadata.uid !== first.metadata.uid, `replacement ${nameOf(replacement)} is online on ${replacement.status?.nodeName ?? "?"}`);
  return replacement;
}

export interface IsolationRound {
  readonly jobs: readonly TestJob[];
  readonly nodes: ReadonlySet<string>;
}

/** Step 5: three jobs at once on separate VMs over both nodes; none sees another's files or network. */
export async function isolatedJobs(world: RunnerWorld, check: Checks): Promise<IsolationRound> {
  const barrier = `${world.github.url}/_imp-test/control/barriers/iso-${Date.now()}`;
  const jobs = ["iso-1", "iso-2", "iso-3"].map((name) => world.queueJob(name, isolationSteps(name, 3, barrier), JOB_LABELS));
  for (const job of jobs) await world.waitForJob(job, "completed", 600_000);
  const runners = jobs.map((j) => j.runnerName ?? "");
  check(new Set(runners).size === 3, `the three jobs ran on three VMs: ${runners.join(", ")}`);
  const nodes = new Set(runners.map((r) => world.history(r)?.last.status?.nodeName ?? "?"));
  check(nodes.size === 2, `spread over both nodes: ${[...nodes].sort().join(", ")}`);
  let probes = 0;
  for (const job of jobs) {
    const log = job.result?.log ?? "";
    check(job.conclusion === "success", `${job.name} succeeded`, log);
    const report = parseIsolation(log);
    check(report.me === job.name && report.foreignFiles === "", `${job.name} sees no other job's files`, log);
    check(report.self === job.name, `${job.name} reaches its own listener (the probe works)`, log);
    const reached = report.probes.filter((p) => p.reached !== undefined);
    check(reached.length === 0, `${job.name} reaches none of the other VMs (${report.probes.map((p) => p.ip).join(", ") || "none on its subnet"})`, log);
    probes += report.probes.length;
  }
  check(probes > 0, "two VMs shared a node and each was refused the other's address");
  return { jobs, nodes };
}

/** The timeline of a job that ran on `vm`, `replacement` the VM that took its place. */
export function timelineOf(world: RunnerWorld, job: TestJob, vmName: string, replacement?: Stored<ImpVM>): JobTimeline {
  const vm = world.history(vmName)?.last;
  if (vm === undefined) throw new Error(`VM ${vmName} was never seen`);
  return jobTimeline(vm, { queuedAt: job.queuedAt, startedAt: job.startedAt, completedAt: job.completedAt }, replacement);
}

export { formatJobTimeline };
