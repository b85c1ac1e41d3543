/**
 * Gitea Actions behind the forge interface. Gitea's model differs from GitHub's in two ways that
 * shape this file (docs/forges.md):
 *  - the registration token is reusable (until rotated), so it never leaves the operator: the
 *    operator itself calls the runner protocol's Register for each VM, and the one-time setup is the
 *    resulting runner's `.runner` file (its uuid and token), which an ephemeral runner can use for
 *    exactly one job (Gitea deletes it when that job ends);
 *  - a runner cannot be bound to a job: it takes the oldest queued job its labels match, so demand
 *    is the scope's queued jobs, listed whole (one request), and any of the pool's runners serves it.
 * Runner names are not unique on Gitea: a registration left by a crash (registered, never recorded)
 * is found by name and removed before a VM registers again.
 */
import type { CredentialText } from "../github/index.ts";
import { SetupText, type FinishedJobFacts, type ForgeRunner, type JobState, type MintedRunner, type PoolForge, type QueuedJob, type RemoveResult } from "../types.ts";
import { describeGiteaScope, type GiteaClient, type GiteaScope } from "./client.ts";

export interface GiteaForgeOptions {
  readonly client: Pick<GiteaClient, "registrationToken" | "register" | "listRunners" | "deleteRunner" | "listJobs" | "getJob" | "getRun" | "stopZombieTasks">;
  readonly scope: GiteaScope;
  /** Gitea's root URL as the VMs reach it (the `.runner` file's address). */
  readonly url: string;
  readonly labels: readonly string[];
  /** The scope's registration token, kept by whoever builds forges (it is reusable; one fetch serves many mints). */
  readonly registrationToken: (signal?: AbortSignal) => Promise<CredentialText>;
  /** Forget a cached registration token (Gitea refused it: rotated). */
  readonly forgetRegistrationToken: () => void;
}

export class GiteaForge implements PoolForge {
  readonly kind = "gitea" as const;
  readonly #o: GiteaForgeOptions;

  constructor(options: GiteaForgeOptions) {
    this.#o = options;
  }

  /** Registers runner `name` (ephemeral, the pool's labels) and returns its `.runner` file as the one-time setup. */
  async mint(name: string, signal?: AbortSignal): Promise<MintedRunner> {
    // A registration of this name left by a crash between Register and the Secret: remove it first,
    // or it would stay registered (and could take a job) with no VM behind it.
    await this.removeRunner(name, undefined, signal);
    let token = await this.#o.registrationToken(signal);
    let runner;
    try {
      runner = await this.#o.client.register(token, { name, labels: this.#o.labels }, signal);
    } catch (err) {
      if ((err as { code?: string }).code !== "GiteaRegistrationRefused") throw err;
      // Rotated on Gitea since we fetched it: fetch the scope's current one and try once more.
      this.#o.forgetRegistrationToken();
      token = await this.#o.registrationToken(signal);
      runner = await this.#o.client.register(token, { name, labels: this.#o.labels }, signal);
    }
    // gitea-runner's own format (internal/pkg/config/registration.go); labels in full `name:host`
    // form, so the runner does not rewrite the file to normalise them.
    const file = {
      WARNING: "Written by Imp for one ephemeral runner: its token is a one-time credential.",
      id: runner.id,
      uuid: runner.uuid,
      name: runner.name,
      token: runner.token.reveal(),
      address: this.#o.url,
      labels: this.#o.labels.map((l) => `${l}:host`),
      ephemeral: true,
    };
    return { runnerId: runner.id, runnerName: runner.name, setup: new SetupText(JSON.stringify(file)) };
  }

  /**
   * Removes every registration of `name` (and `knownId`). `busy` while one has a job in progress
   * (it would otherwise delete it under a running job, which Gitea then leaves running as a
   * zombie until its timeout). After removing a runner whose VM is gone, asks Gitea (site admins
   * only) to stop zombie tasks now, so a job whose VM died fails at ZOMBIE_TASK_TIMEOUT.
   */
  async removeRunner(name: string, knownId: number | undefined, signal?: AbortSignal): Promise<RemoveResult> {
    const runners = await this.#o.client.listRunners(this.#o.scope, signal);
    const mine = runners.filter((r) => r.name === name || r.id === knownId);
    if (mine.length === 0) return "done";
    const running = await this.#runningJobRunners(signal);
    if (mine.some((r) => r.busy || running.has(r.name))) return "busy";
    let removed = 0;
    for (const r of mine) if ((await this.#o.client.deleteRunner(this.#o.scope, r.id, signal)) === "deleted") removed++;
    if (removed > 0 && knownId !== undefined) await this.#o.client.stopZombieTasks(signal).catch(() => false);
    return "done";
  }

  async listRunners(prefix: string, signal?: AbortSignal): Promise<readonly ForgeRunner[]> {
    const runners = (await this.#o.client.listRunners(this.#o.scope, signal)).filter((r) => r.name.startsWith(prefix));
    const running = runners.length === 0 ? new Set<string>() : await this.#runningJobRunners(signal);
    return runners.map((r) => ({ id: r.id, name: r.name, busy: r.busy || running.has(r.name), online: r.online }));
  }

  /**
   * Names of the runners with a job in progress in the scope. Gitea's own `busy` flag means "the
   * runner reported within the last 10 s" (RunnerIdleTime), so a runner mid-job that could not
   * reach Gitea for a while (a Gitea restart, a loaded node) is listed idle; the job list is not.
   */
  async #runningJobRunners(signal?: AbortSignal): Promise<ReadonlySet<string>> {
    const jobs = await this.#o.client.listJobs(this.#o.scope, "in_progress", signal);
    return new Set(jobs.flatMap((j) => (j.runnerName === undefined ? [] : [j.runnerName])));
  }

  /** The scope's queued jobs, whole: Gitea lists them per repository and per organization. */
  async listScopeQueuedJobs(signal?: AbortSignal): Promise<readonly QueuedJob[]> {
    const jobs = await this.#o.client.listJobs(this.#o.scope, "queued", signal);
    const fallback = this.#o.scope.kind === "repo" ? `${this.#o.scope.owner}/${this.#o.scope.repo}` : "";
    return jobs.map((j) => ({ id: j.id, runAttempt: j.runAttempt, labels: j.labels, repository: j.repository === "" ? fallback : j.repository, ...(j.createdAt === undefined ? {} : { queuedAt: j.createdAt }) }));
  }

  async jobState(repository: string, jobId: number, signal?: AbortSignal): Promise<JobState> {
    const [owner = "", repo = ""] = repository.split("/");
    const job = await this.#o.client.getJob(owner, repo, jobId, signal);
    if (job === undefined) return "unknown";
    if (job.status === "queued" || job.status === "waiting") return "queued";
    if (job.status === "in_progress") return "running";
    return "done";
  }

  /**
   * The job (conclusion, completion) and its run (event, branch, repository and its default branch).
   * Gitea 1.27 names no head repository for a run; its runs from forks are pull-request events.
   */
  async jobFacts(repository: string, jobId: number, signal?: AbortSignal): Promise<FinishedJobFacts | undefined> {
    const [owner = "", repo = ""] = repository.split("/");
    const job = await this.#o.client.getJob(owner, repo, jobId, signal);
    if (job === undefined) return undefined;
    const run = await this.#o.client.getRun(owner, repo, job.runId, signal);
    if (run === undefined) return undefined;
    return {
      repository: run.repository,
      event: run.event,
      branch: run.headBranch === "" ? undefined : run.headBranch,
      defaultBranch: run.defaultBranch,
      fromFork: run.headRepository !== undefined && run.headRepository !== run.repository,
      conclusion: job.conclusion ?? "",
      completedAt: job.completedAt,
    };
  }

  toString(): string {
    return `Gitea ${describeGiteaScope(this.#o.scope)} at ${this.#o.url}`;
  }
}
