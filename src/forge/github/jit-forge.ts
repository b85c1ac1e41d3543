/**
 * GitHub's just-in-time runners behind the forge interface: `generate-jitconfig` mints, the REST
 * runner endpoints list and remove, and the workflow-run endpoints list queued jobs and read one
 * job. Registration is idempotent by the runner name, which is the ImpVM name: GitHub refuses a
 * second runner of the same name, so whatever a crash left behind under that name is the one stale
 * registration of this VM and may be removed.
 */
import { GitHubErrorCode, type GitHubClient, type GitHubScope, type JitRunner } from "./index.ts";
import { conflictError, ImpError, retryableError } from "../../shared/index.ts";
import { SetupText, type FinishedJobFacts, type ForgeRunner, type JobState, type MintedRunner, type PoolForge, type QueuedJob, type RemoveResult } from "../types.ts";

export interface GitHubJitForgeOptions {
  readonly client: GitHubClient;
  readonly scope: GitHubScope;
  /** The id of the pool's runner group (looked up lazily, once). */
  readonly runnerGroupId: (signal?: AbortSignal) => Promise<number>;
  readonly labels: readonly string[];
}

/** A 409, or a 422 whose message says the name is taken (GitHub has answered both over time). */
export function isNameTaken(err: unknown): boolean {
  if (!(err instanceof ImpError)) return false;
  if (err.code === GitHubErrorCode.Conflict) return true;
  return err.code === GitHubErrorCode.Invalid && /already exists/i.test(err.message);
}

export class GitHubJitForge implements PoolForge {
  readonly kind = "github" as const;
  readonly #o: GitHubJitForgeOptions;

  constructor(options: GitHubJitForgeOptions) {
    this.#o = options;
  }

  /**
   * Registers runner `name`. If GitHub says the name is taken, the taken one is a stale registration
   * of this same VM (minted, then the operator died before storing it): it is deleted and the mint
   * is repeated once. A second refusal is a conflict for the queue to retry, never a loop here.
   */
  async mint(name: string, signal?: AbortSignal): Promise<MintedRunner> {
    const runnerGroupId = await this.#o.runnerGroupId(signal);
    const attempt = async (): Promise<MintedRunner> => toMinted(await this.#o.client.generateJitConfig(this.#o.scope, { name, runnerGroupId, labels: this.#o.labels }));
    try {
      return await attempt();
    } catch (err) {
      if (!isNameTaken(err)) throw err;
    }
    if ((await this.removeRunner(name, undefined)) === "busy") {
      throw retryableError("RunnerNameBusy", `Cannot register runner ${name}: a runner of that name is running a job`);
    }
    try {
      return await attempt();
    } catch (err) {
      if (isNameTaken(err)) throw conflictError("RunnerNameTaken", `Cannot register runner ${name}: the name is taken again right after its stale registration was removed`, { cause: err });
      throw err;
    }
  }

  /** Removes every registration of `name` (and `knownId`); `busy` if GitHub refuses because one runs a job (422). */
  async removeRunner(name: string, knownId: number | undefined): Promise<RemoveResult> {
    const ids = new Set(knownId === undefined ? [] : [knownId]);
    // A crash between minting and recording leaves a runner nobody knows the id of: look it up by name.
    for (const r of await this.#o.client.listRunners(this.#o.scope, { name })) if (r.name === name) ids.add(r.id);
    let busy = false;
    for (const id of ids) if ((await this.#o.client.deleteRunner(this.#o.scope, id)) === "busy") busy = true;
    return busy ? "busy" : "done";
  }

  async listRunners(prefix: string): Promise<readonly ForgeRunner[]> {
    const runners = await this.#o.client.listRunners(this.#o.scope);
    return runners.filter((r) => r.name.startsWith(prefix)).map((r) => ({ id: r.id, name: r.name, busy: r.busy, online: r.status === "online" }));
  }

  async listQueuedJobs(repositories: readonly string[]): Promise<readonly QueuedJob[]> {
    const jobs: QueuedJob[] = [];
    for (const repository of repositories) {
      const [owner = "", repo = ""] = repository.split("/");
      for (const job of await this.#o.client.listQueuedJobs({ owner, repo })) {
        jobs.push({ id: job.id, runAttempt: job.runAttempt, labels: job.labels, repository, ...(job.createdAt === undefined ? {} : { queuedAt: job.createdAt }) });
      }
    }
    return jobs;
  }

  async jobState(repository: string, jobId: number): Promise<JobState> {
    const [owner = "", repo = ""] = repository.split("/");
    const job = await this.#o.client.getWorkflowJob({ owner, repo }, jobId);
    if (job === undefined) return "unknown";
    // waiting/requested/pending: not yet released to runners, but demand that will come; queued: now.
    if (job.status === "queued" || job.status === "waiting" || job.status === "requested" || job.status === "pending") return "queued";
    if (job.status === "in_progress") return "running";
    return "done";
  }

  async jobFacts(repository: string, jobId: number): Promise<FinishedJobFacts | undefined> {
    return readJobFacts(this.#o.client, repository, jobId);
  }
}

/** The job (conclusion, completion) and its run (event, branch, repository, head repository), from GitHub's REST API. */
export async function readJobFacts(client: Pick<GitHubClient, "getWorkflowJob" | "getWorkflowRun">, repository: string, jobId: number): Promise<FinishedJobFacts | undefined> {
  const [owner = "", repo = ""] = repository.split("/");
  const job = await client.getWorkflowJob({ owner, repo }, jobId);
  if (job === undefined) return undefined;
  const run = await client.getWorkflowRun({ owner, repo }, job.runId);
  if (run === undefined) return undefined;
  return {
    repository: run.repository,
    event: run.event,
    branch: run.headBranch ?? undefined,
    defaultBranch: run.defaultBranch,
    // A run GitHub names no head repository for is treated as foreign: on doubt, no promotion.
    fromFork: run.headRepository !== run.repository,
    conclusion: job.conclusion ?? "",
    completedAt: job.completedAt,
  };
}

function toMinted(runner: JitRunner): MintedRunner {
  return { runnerId: runner.runnerId, runnerName: runner.runnerName, setup: new SetupText(runner.encodedJitConfig.reveal()) };
}
