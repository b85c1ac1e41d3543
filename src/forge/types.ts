/**
 * What the operator needs from a forge (GitHub, Gitea), per runner pool: mint a runner's one-time
 * setup, find and remove registrations, list the pool's runners, and — where the forge offers it —
 * list the jobs waiting for a runner and tell one job's state. Everything the pool controller and
 * the setup controller do with a forge goes through this interface; the sealed setup, the
 * ambiguous-handoff rule and the invariants do not depend on which forge it is.
 */

/** A setup in plain text, for as long as it takes to seal it. Never logged: no toString, no JSON. */
export class SetupText {
  readonly #text: string;
  constructor(text: string) {
    this.#text = text;
  }
  /** The plaintext; the only way to it. */
  reveal(): string {
    return this.#text;
  }
  toString(): string {
    return "[one-time runner setup]";
  }
  toJSON(): string {
    return "[one-time runner setup]";
  }
}

export interface MintedRunner {
  readonly runnerId: number;
  readonly runnerName: string;
  /** What the VM's runner needs to come online once (GitHub: the encoded JIT config; Gitea: the `.runner` file). */
  readonly setup: SetupText;
}

export interface ForgeRunner {
  readonly id: number;
  readonly name: string;
  readonly busy: boolean;
  readonly online: boolean;
}

/** A job that waits for a runner, as the forge lists it. */
export interface QueuedJob {
  readonly id: number;
  /** 1, and one more for each re-run. GitHub and Gitea 1.27 give a re-run a new job id; a forge that kept the id would still not stall (see RunnerActivity). */
  readonly runAttempt?: number;
  readonly labels: readonly string[];
  /** `owner/name` of its repository. */
  readonly repository: string;
  /** When it was queued, ms since the epoch, if the forge says. */
  readonly queuedAt?: number;
}

/** A job's state on the forge: `unknown` when it cannot tell (no such job). */
export type JobState = "queued" | "running" | "done" | "unknown";

/**
 * What the forge says about a finished job and its run: what a cache promotion is decided from
 * (src/operator/caches). Read from the forge's API after the job ended, never from the VM.
 */
export interface FinishedJobFacts {
  /** `owner/name` of the repository the run belongs to. */
  readonly repository: string;
  /** The event that started the run (`push`, `pull_request`, `schedule`, …). */
  readonly event: string;
  /** The branch the run is for, without `refs/heads/`; undefined for a tag or when the forge does not say. */
  readonly branch: string | undefined;
  /** The repository's default branch, as the forge reports it now. */
  readonly defaultBranch: string;
  /** The run's code comes from another repository (a fork). */
  readonly fromFork: boolean;
  /** The job's conclusion (`success`, `failure`, `cancelled`, …); empty while it runs. */
  readonly conclusion: string;
  /** When the job completed (ms since the epoch, the forge's clock); undefined while it runs. */
  readonly completedAt: number | undefined;
}

/** `busy`: the forge refuses while the runner runs a job (wait for it to end). */
export type RemoveResult = "done" | "busy";

export interface PoolForge {
  /** GitHub (JIT or scale set) or Gitea: for Events, metrics and docs. */
  readonly kind: "github" | "github-scale-set" | "gitea";
  /**
   * Registers runner `name` and returns its one-time setup. Idempotent by name: a registration of
   * the same name left by a crash (minted, never recorded) is removed and the mint repeated once.
   */
  mint(name: string, signal?: AbortSignal): Promise<MintedRunner>;
  /** Removes every registration of `name` (and `knownId`). Idempotent: none left counts as done. */
  removeRunner(name: string, knownId: number | undefined, signal?: AbortSignal): Promise<RemoveResult>;
  /** The registrations whose names start with `prefix` (the pool's VMs), online or not. */
  listRunners(prefix: string, signal?: AbortSignal): Promise<readonly ForgeRunner[]>;
  /**
   * Jobs waiting for a runner in `repositories` (`owner/name`; the pool's own repository when its
   * scope is one). Absent where the forge offers no listing at bounded cost.
   */
  listQueuedJobs?(repositories: readonly string[], signal?: AbortSignal): Promise<readonly QueuedJob[]>;
  /**
   * Jobs waiting for a runner anywhere in the pool's scope, where the forge lists them whole at
   * bounded cost (Gitea: its repository or organization job listing). Preferred over listQueuedJobs.
   */
  listScopeQueuedJobs?(signal?: AbortSignal): Promise<readonly QueuedJob[]>;
  /** One job's state, to verify a demand signal before it costs a VM. */
  jobState?(repository: string, jobId: number, signal?: AbortSignal): Promise<JobState>;
  /** What the forge says about a job and its run (undefined: no such job), for the cache trust rule. */
  jobFacts?(repository: string, jobId: number, signal?: AbortSignal): Promise<FinishedJobFacts | undefined>;
  /**
   * Removes what the pool registered on the forge besides its runners (a runner scale set), once
   * the pool is deleted and its VMs are gone. Idempotent.
   */
  retire?(signal?: AbortSignal): Promise<void>;
}
