/**
 * Jobs behave as on a hosted runner: the conformance job (runner-path/conformance.ts) on the Debian
 * Docker runner image, on both forges at once — as a GitHub job taken by the test runner and as a
 * pushed Gitea workflow taken by the real gitea-runner — each as the `runner` user in its own VM on
 * one node. Every check must pass by name, but for a runner program's own known gaps
 * (KNOWN_RUNNER_GAPS, which must fail as listed); the background process the job leaves running must not
 * keep its VM alive (the VM ends Succeeded and nothing of it stays on the node).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CONFORMANCE_CHECKS, conformanceStepForSh, conformanceWorkflow, KNOWN_RUNNER_GAPS, parseConformance, type ConformanceCheck } from "./runner-path/conformance.ts";
import { dockerWorldUnavailable, giteaWorldUnavailable, GITEA_REPO, RunnerWorld } from "./runner-path/world.ts";

const unavailable = (await dockerWorldUnavailable()) ?? (await giteaWorldUnavailable());
if (unavailable !== undefined) process.stdout.write(`# hosted-runner conformance: cannot run on this machine: ${unavailable}\n`);

const GITHUB_LABELS = ["self-hosted", "imp", "docker"];
const GITEA_LABEL = "imp-gitea-docker";

function assertConforms(forge: "github" | "gitea", log: string): void {
  const results = parseConformance(log);
  const names = Object.keys(CONFORMANCE_CHECKS) as ConformanceCheck[];
  const failed = names.filter((name) => results.get(name)?.ok !== true);
  for (const name of names) process.stdout.write(`#   ${forge} ${name}: ${results.get(name)?.ok === true ? "ok" : "FAIL"} ${results.get(name)?.detail ?? "(not reported)"}\n`);
  const known = Object.keys(KNOWN_RUNNER_GAPS[forge]);
  assert.deepEqual(failed, known, `${forge}: every hosted-runner check passes but the runner's known gaps (${known.join(", ") || "none"}); failed or missing: ${failed.map((n) => `${n} (${results.get(n)?.detail ?? "not reported"})`).join("; ")}\n${log}`);
  assert.match(log, /conformance background pid \d+ left running/, `${forge}: the job left its background process running`);
}

describe("hosted-runner conformance on the Debian runner image, GitHub and Gitea", { skip: unavailable, timeout: 1_800_000 }, () => {
  let world: RunnerWorld;
  before(async () => {
    world = await RunnerWorld.start({ nodes: 1, docker: true, gitea: true, say: (line) => process.stdout.write(`# ${line}\n`) });
  });
  after(async () => {
    await world?.dispose();
  });

  it("the conformance job passes every check on both forges; its background process ends with the VM, and nothing is left", async () => {
    const gitea = world.gitea;
    assert.ok(gitea !== undefined);
    await world.applyPool("conform-gh", { minIdle: 1, maxConcurrent: 1, labels: GITHUB_LABELS, docker: true });
    await world.applyGiteaPool("conform-gitea", { minIdle: 1, maxConcurrent: 1, labels: [GITEA_LABEL], docker: true });
    const job = world.queueJob("conformance", [{ name: "hosted-runner conformance", run: conformanceStepForSh() }], GITHUB_LABELS);
    await gitea.putFile(GITEA_REPO.owner, GITEA_REPO.repo, ".gitea/workflows/conformance.yml", conformanceWorkflow(GITEA_LABEL));

    await world.waitForJob(job, "completed", 1_200_000);
    const githubLog = job.result?.log ?? "";
    assertConforms("github", githubLog);
    assert.equal(job.conclusion, "success", githubLog);

    const giteaJob = await world.waitUntil("the conformance job completed on Gitea", async () => (await gitea.jobs(GITEA_REPO.owner, GITEA_REPO.repo)).find((j) => j.name === "conformance" && j.status === "completed"), 1_200_000, 1_000);
    const giteaLog = await gitea.jobLog(GITEA_REPO.owner, GITEA_REPO.repo, giteaJob.id);
    assertConforms("gitea", giteaLog);
    // The script exits with its count of failed checks: the known gaps, nothing else.
    assert.equal(giteaJob.conclusion, Object.keys(KNOWN_RUNNER_GAPS.gitea).length === 0 ? "success" : "failure", giteaLog);

    // The runner names: GitHub's from the job's result, Gitea's from the pool's VMs whose runner took
    // it (the log Gitea serves names the runner).
    const node = world.nodes[0];
    assert.ok(node !== undefined);
    const giteaVms = [...world.seenVms.keys()].filter((n) => world.history(n)?.last.metadata.labels?.["imp.dev/pool"] === "conform-gitea" && giteaLog.includes(n));
    const ended = [job.runnerName ?? "", ...giteaVms];
    assert.equal(ended.filter((n) => n !== "").length, 2, `both jobs' VMs are known: ${ended.join(", ")}`);
    for (const name of ended) {
      await world.waitUntil(`${name} Succeeded`, () => (world.history(name)?.phases.includes("Succeeded") === true ? true : undefined), 300_000, 200);
      assert.equal(world.history(name)?.last.status?.exitCode, 0, `${name}: the runner exited 0 with the job's background process still running`);
      const uid = world.history(name)?.last.metadata.uid ?? "";
      await world.waitUntil(`${name} gone`, async () => ((await world.getVm(name)) === undefined ? true : undefined), 300_000);
      const left: string[] = await world.waitUntil(`nothing of ${name} on the node`, async () => ((await world.leftoversOf(node, uid)).length === 0 ? ([] as string[]) : undefined), 120_000, 500).catch(async () => world.leftoversOf(node, uid));
      assert.deepEqual(left, [], `nothing of ${name} is left on the node`);
    }
  });
});
