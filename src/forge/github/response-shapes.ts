import { GitHubErrorCode } from "./errors.ts";
import { terminalError } from "../../shared/index.ts";

/**
 * The few fields Imp reads from GitHub's runner responses, checked at the boundary: a response
 * without them is a GitHubUnexpectedResponse, not a crash three calls later.
 */
export interface GitHubRunner {
  readonly id: number;
  readonly name: string;
  readonly os: string;
  /** "online" or "offline" today; kept as a string so a new value does not break parsing. */
  readonly status: string;
  readonly busy: boolean;
  readonly labels: readonly string[];
  readonly runnerGroupId: number | undefined;
  readonly ephemeral: boolean | undefined;
}

export interface GitHubRunnerGroup {
  readonly id: number;
  readonly name: string;
  readonly isDefault: boolean;
  readonly visibility: string | undefined;
}

type Json = Record<string, unknown>;

function unexpected(what: string, problem: string): never {
  throw terminalError(GitHubErrorCode.UnexpectedResponse, `Cannot read ${what}: GitHub's response ${problem}`);
}

export function asObject(value: unknown, what: string): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value)) unexpected(what, "is not a JSON object");
  return value as Json;
}

function field<T>(obj: Json, key: string, type: "number" | "string" | "boolean", what: string): T {
  const value = obj[key];
  if (typeof value !== type) unexpected(what, `has no ${type} field "${key}"`);
  return value as T;
}

function optional<T>(obj: Json, key: string, type: "number" | "boolean" | "string"): T | undefined {
  const value = obj[key];
  return typeof value === type ? (value as T) : undefined;
}

export function parseRunner(value: unknown, what = "runner"): GitHubRunner {
  const obj = asObject(value, what);
  const labels = obj["labels"];
  if (!Array.isArray(labels)) unexpected(what, 'has no array "labels"');
  return {
    id: field<number>(obj, "id", "number", what),
    name: field<string>(obj, "name", "string", what),
    os: field<string>(obj, "os", "string", what),
    status: field<string>(obj, "status", "string", what),
    busy: field<boolean>(obj, "busy", "boolean", what),
    labels: labels.map((label) => field<string>(asObject(label, `${what} label`), "name", "string", `${what} label`)),
    runnerGroupId: optional<number>(obj, "runner_group_id", "number"),
    ephemeral: optional<boolean>(obj, "ephemeral", "boolean"),
  };
}

/** A workflow job as Imp reads it: enough to know whether it still waits for a runner, and for which labels. */
export interface GitHubWorkflowJob {
  readonly id: number;
  readonly runId: number;
  /** queued, in_progress, completed, waiting, requested, pending; a string so a new value parses. */
  readonly status: string;
  readonly labels: readonly string[];
  readonly runnerName: string | null;
  /** created_at in ms since the epoch, when GitHub gives one. */
  readonly createdAt: number | undefined;
  /** run_attempt: 1 for the first run, more for each re-run (1 when absent). */
  readonly runAttempt: number;
  /** success, failure, cancelled, …; undefined until the job completed. */
  readonly conclusion: string | undefined;
  /** completed_at in ms since the epoch; undefined until the job completed. */
  readonly completedAt: number | undefined;
}

/** A workflow run, as the cache trust rule reads it. */
export interface GitHubWorkflowRun {
  readonly id: number;
  readonly event: string;
  /** The branch the run is for; null for a tag or a run GitHub names no branch for. */
  readonly headBranch: string | null;
  /** `owner/name` of the run's repository and its default branch (empty when GitHub leaves it out). */
  readonly repository: string;
  readonly defaultBranch: string;
  /** `owner/name` of the repository the run's code came from (a fork's for a pull request from a fork). */
  readonly headRepository: string | undefined;
}

export function parseWorkflowRun(value: unknown, what = "workflow run"): GitHubWorkflowRun {
  const obj = asObject(value, what);
  const repository = asObject(obj["repository"], `${what}'s repository`);
  const head = obj["head_repository"] === null || obj["head_repository"] === undefined ? undefined : asObject(obj["head_repository"], `${what}'s head repository`);
  return {
    id: field<number>(obj, "id", "number", what),
    event: field<string>(obj, "event", "string", what),
    headBranch: typeof obj["head_branch"] === "string" && obj["head_branch"] !== "" ? obj["head_branch"] : null,
    repository: field<string>(repository, "full_name", "string", `${what}'s repository`),
    defaultBranch: optional<string>(repository, "default_branch", "string") ?? "",
    headRepository: head === undefined ? undefined : field<string>(head, "full_name", "string", `${what}'s head repository`),
  };
}

export function parseWorkflowJob(value: unknown, what = "workflow job"): GitHubWorkflowJob {
  const obj = asObject(value, what);
  const labels = obj["labels"];
  if (!Array.isArray(labels) || labels.some((l) => typeof l !== "string")) unexpected(what, 'has no array of strings "labels"');
  const created = typeof obj["created_at"] === "string" ? Date.parse(obj["created_at"]) : Number.NaN;
  return {
    id: field<number>(obj, "id", "number", what),
    runId: field<number>(obj, "run_id", "number", what),
    status: field<string>(obj, "status", "string", what),
    labels: labels as string[],
    runnerName: typeof obj["runner_name"] === "string" && obj["runner_name"] !== "" ? obj["runner_name"] : null,
    createdAt: Number.isNaN(created) ? undefined : created,
    runAttempt: typeof obj["run_attempt"] === "number" && Number.isSafeInteger(obj["run_attempt"]) && obj["run_attempt"] >= 1 ? obj["run_attempt"] : 1,
    conclusion: typeof obj["conclusion"] === "string" && obj["conclusion"] !== "" ? obj["conclusion"] : undefined,
    completedAt: typeof obj["completed_at"] === "string" && Number.isFinite(Date.parse(obj["completed_at"])) ? Date.parse(obj["completed_at"]) : undefined,
  };
}

export function parseRunnerGroup(value: unknown): GitHubRunnerGroup {
  const obj = asObject(value, "runner group");
  return {
    id: field<number>(obj, "id", "number", "runner group"),
    name: field<string>(obj, "name", "string", "runner group"),
    isDefault: optional<boolean>(obj, "default", "boolean") ?? false,
    visibility: optional<string>(obj, "visibility", "string"),
  };
}

/** A page of a list endpoint: `{ total_count, <key>: [...] }`. */
export function parsePage(value: unknown, key: string, what: string): { readonly total: number; readonly items: readonly unknown[] } {
  const obj = asObject(value, what);
  const items = obj[key];
  if (!Array.isArray(items)) unexpected(what, `has no array "${key}"`);
  return { total: field<number>(obj, "total_count", "number", what), items };
}
