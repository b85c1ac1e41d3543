/**
 * The Gitea scenario, step by step, on a RunnerWorld started with `gitea: true`: a real Gitea
 * 1.27.3, the real gitea-runner v1.0.8 inside each VM (images/gitea-runner), a real workflow pushed
 * to a repository. `npm run demo -- --forge gitea` prints it; test/e2e/gitea.test.ts runs it.
 */
import type { ImpVM } from "../../../src/api/index.ts";
import type { Checks } from "./scenario.ts";
import { GITEA_REPO, nameOf, type RunnerWorld } from "./world.ts";
import type { GiteaJobView } from "../../gitea/gitea-server.ts";

export const GITEA_POOL = "gitea";
export const GITEA_LABEL = "imp-gitea";
const RUNNERS = `/repos/${GITEA_REPO.owner}/${GITEA_REPO.repo}`;

/** A local composite action, used by the workflow with `uses: ./.gitea/actions/greet`. */
export const GREET_ACTION = `name: greet
description: says hello from inside the job's VM
inputs:
  who:
    required: true
runs:
  using: composite
  steps:
    - run: echo "hello, \${{ inputs.who }}, from a local action in $(cat /etc/debian_version 2>/dev/null | sed 's/^/Debian /')"
      shell: bash
`;

/** The workflow: several steps, an env var, a clone of the repository, the local action. */
export const WORKFLOW = `name: ci
on: [push]
jobs:
  build:
    runs-on: ${GITEA_LABEL}
    env:
      GREETING: hello
    steps:
      - name: where am I
        run: echo "job on $(hostname), kernel $(uname -r), $(nproc) vCPU, $(id -un)"
      - name: check out
        run: git clone --quiet --depth 1 "\${{ github.server_url }}/\${{ github.repository }}" . && git log --oneline -1
      - name: local action
        uses: ./.gitea/actions/greet
        with:
          who: microVM
      - name: env
        run: test "$GREETING" = hello && echo "GREETING is $GREETING"
`;

interface GiteaRunnerView {
  readonly name: string;
  readonly status: string;
}

async function giteaRunners(world: RunnerWorld): Promise<GiteaRunnerView[]> {
  return (await world.gitea?.runners(RUNNERS)) ?? [];
}

/** A VM of the Gitea pool that is Running and whose runner Gitea shows online. */
async function onlineGiteaRunner(world: RunnerWorld, except: ReadonlySet<string>): Promise<ImpVM> {
  return world.waitUntil("a Gitea runner VM online", async () => {
    const online = new Set((await giteaRunners(world)).filter((r) => r.status === "online").map((r) => r.name));
    return (await world.listVms(GITEA_POOL)).find((vm) => !except.has(nameOf(vm)) && vm.status?.phase === "Running" && online.has(nameOf(vm)));
  });
}

/** Step 1: a Gitea pool (minIdle 1); a VM boots with its sealed `.runner`; its gitea-runner comes online on Gitea. */
export async function giteaPoolComesOnline(world: RunnerWorld, check: Checks): Promise<{ applied: string; vm: ImpVM }> {
  const applied = await world.applyGiteaPool(GITEA_POOL, { minIdle: 1, maxConcurrent: 2, labels: [GITEA_LABEL] });
  check(/impvmrunnerpool\.imp\.dev\/gitea (created|configured)/.test(applied), "kubectl applied the Gitea runner pool", applied);
  const vm = await onlineGiteaRunner(world, new Set());
  const status = vm.status ?? {};
  check(status.setup?.state === "Delivered", `VM ${nameOf(vm)} on ${status.nodeName ?? "?"} got its one-time setup (a .runner file minted with Gitea's Register)`, JSON.stringify(status.setup));
  check(status.runner?.name === nameOf(vm), `its runner is registered on Gitea as ${nameOf(vm)} (id ${status.runner?.id ?? "?"}) and online`);
  const stored = (await world.getVm(nameOf(vm)))?.status?.setup?.sealed ?? "";
  check(/"ct":/.test(stored) && !/"uuid"|"token"/.test(stored), "the VM's status holds only the sealed setup, not the .runner file");
  const leaked = [world.operator, ...world.nodes.map((n) => n.agent)].filter((p) => /"uuid":\s*"[0-9a-f-]{36}"/.test(p.log()));
  check(leaked.length === 0, "no operator or agent log contains a .runner file", leaked.map((p) => p.name).join(", "));
  return { applied, vm };
}

/** Step 2: push a workflow; the job runs in the VM with the real runner; its log comes from Gitea's API. */
export async function giteaWorkflowRuns(world: RunnerWorld, vm: ImpVM, check: Checks): Promise<{ job: GiteaJobView; log: string }> {
  const gitea = world.gitea;
  if (gitea === undefined) throw new Error("no Gitea in this world");
  await gitea.putFile(GITEA_REPO.owner, GITEA_REPO.repo, ".gitea/actions/greet/action.yml", GREET_ACTION);
  await gitea.putFile(GITEA_REPO.owner, GITEA_REPO.repo, ".gitea/workflows/ci.yml", WORKFLOW);
  const job = await world.waitUntil("the workflow's job completed on Gitea", async () => {
    const done = (await gitea.jobs(GITEA_REPO.owner, GITEA_REPO.repo)).find((j) => j.name === "build" && j.status === "completed");
    return done;
  }, 300_000, 500);
  const log = await gitea.jobLog(GITEA_REPO.owner, GITEA_REPO.repo, job.id);
  check(job.conclusion === "success", `the job succeeded on Gitea (run ${job.run_id}, job ${job.id})`, log);
  check(new RegExp(`job on \\S+, kernel \\S+, 1 vCPU, root`).test(log), "it ran inside the microVM (1 vCPU, the guest kernel)", log);
  check(/hello, microVM, from a local action in Debian 12/.test(log), "the local action ran (uses: ./.gitea/actions/greet)", log);
  check(/GREETING is hello/.test(log), "the job's env var reached its step", log);
  check(new RegExp(`${nameOf(vm)}\\(version:`).test(log) || log.includes(nameOf(vm)), `the idle runner ${nameOf(vm)} took it (its name is in the log Gitea serves)`, log);
  return { job, log };
}

/** Step 3: the runner exits; the VM ends; its registration and sealed setup go; a replacement comes online. */
export async function giteaVmReplaced(world: RunnerWorld, vm: ImpVM, check: Checks): Promise<ImpVM> {
  const name = nameOf(vm);
  await world.waitUntil(`${name} Succeeded`, () => (world.history(name)?.phases.includes("Succeeded") === true ? true : undefined), 180_000, 100);
  check(world.history(name)?.last.status?.exitCode === 0, `VM ${name} ended Succeeded with exit code 0 (gitea-runner daemon --once took one job)`);
  await world.waitUntil(`${name} deleted`, async () => ((await world.getVm(name)) === undefined ? true : undefined), 180_000);
  check(!(await giteaRunners(world)).some((r) => r.name === name), "no runner of that name is registered on Gitea");
  const last = world.history(name)?.last.status?.setup;
  check(last?.state === "Deleted" && last.sealed === undefined, "its sealed setup left its status before it went", JSON.stringify(last));
  const replacement = await onlineGiteaRunner(world, new Set([name]));
  check(replacement.metadata.uid !== vm.metadata.uid, `replacement ${nameOf(replacement)} is online on Gitea`);
  return replacement;
}
