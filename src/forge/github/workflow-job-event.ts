/**
 * Parses a workflow_job webhook into the shape Imp acts on. The payload is untrusted input even
 * after its signature checked out (a bug on the sender's side is still possible), so every field
 * used is validated, strings are bounded, and anything else is rejected with a reason.
 */
export const WORKFLOW_JOB_ACTIONS = ["queued", "in_progress", "completed"] as const;
export type WorkflowJobAction = (typeof WORKFLOW_JOB_ACTIONS)[number];

export interface WorkflowJobEvent {
  readonly deliveryId: string;
  readonly action: WorkflowJobAction;
  readonly jobId: number;
  readonly runId: number;
  readonly runAttempt: number;
  readonly jobName: string;
  readonly labels: readonly string[];
  /**
   * Set once a runner took the job (in_progress, completed); null while queued, and null on a
   * `completed` job no runner ever took (cancelled while queued: GitHub sends runner_id and
   * runner_name null and conclusion "cancelled").
   */
  readonly runnerName: string | null;
  readonly runnerId: number | null;
  readonly runnerGroupName: string | null;
  readonly conclusion: string | null;
  readonly repository: { readonly owner: string; readonly name: string; readonly fullName: string };
  readonly organization: string | undefined;
  readonly enterprise: string | undefined;
  readonly installationId: number | undefined;
  /** created_at (queued), started_at (taken by a runner; GitHub fills it at queue time too) and completed_at, in ms since the epoch. */
  readonly createdAt?: number;
  readonly startedAt?: number;
  readonly completedAt?: number;
  /** Scale-set messages only: when the scale set acquired the job, and the event that triggered the run (webhooks carry neither). */
  readonly assignedAt?: number;
  readonly eventName?: string;
}

/**
 * What differs between forges that send GitHub's `workflow_job` payload: Gitea (1.24+) sends the
 * same shape under its own header names, names an organization by `name` instead of `login`, and
 * writes the Unix epoch for a time that is not set yet.
 */
export interface WebhookDialect {
  /** The delivery-id header, as people read it (for the rejection reason). */
  readonly deliveryHeader: string;
  /** The key of the organization object that holds its login. */
  readonly organizationLogin: string;
  /** Whether 1970-01-01T00:00:00Z means "not set". */
  readonly epochIsUnset: boolean;
  /** Actions the forge sends that Imp does not act on (answered as ignored, not as bad input). */
  readonly ignoredActions: readonly string[];
}

export const GITHUB_WEBHOOK_DIALECT: WebhookDialect = { deliveryHeader: "X-GitHub-Delivery", organizationLogin: "login", epochIsUnset: false, ignoredActions: [] };

export type WebhookParseResult =
  | { readonly ok: true; readonly event: WorkflowJobEvent }
  | { readonly ok: false; readonly reason: string; readonly ignored?: true };

class Ignored extends Error {}

const MAX_STRING = 1024;
const MAX_LABELS = 100;
const DELIVERY_ID = /^[0-9A-Za-z-]{1,100}$/;

class Reject extends Error {}

type Json = Record<string, unknown>;

function object(value: unknown, what: string): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Reject(`${what} is not an object`);
  return value as Json;
}

function string(value: unknown, what: string): string {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_STRING) throw new Reject(`${what} is not a non-empty string of at most ${MAX_STRING} characters`);
  return value;
}

function nullableString(value: unknown, what: string): string | null {
  return value === null || value === undefined || value === "" ? null : string(value, what);
}

function id(value: unknown, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value <= 0) throw new Reject(`${what} is not a positive integer`);
  return value;
}

function nullableId(value: unknown, what: string): number | null {
  return value === null || value === undefined ? null : id(value, what);
}

const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

function optionalTime(value: unknown, what: string, epochIsUnset = false): number | undefined {
  if (value === undefined || value === null) return undefined;
  const ms = typeof value === "string" && ISO_TIME.test(value) ? Date.parse(value) : Number.NaN;
  if (!Number.isFinite(ms)) throw new Reject(`${what} is not an ISO 8601 time`);
  return epochIsUnset && ms === 0 ? undefined : ms;
}

function optionalLogin(value: unknown, key: string, what: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  return string(object(value, what)[key], `${what}.${key}`);
}

export function parseWorkflowJobWebhook(eventHeader: string | undefined, deliveryId: string | undefined, body: string, dialect: WebhookDialect = GITHUB_WEBHOOK_DIALECT): WebhookParseResult {
  try {
    if (eventHeader !== "workflow_job") throw new Ignored(`event ${JSON.stringify(eventHeader ?? null)} is not workflow_job`);
    if (deliveryId === undefined || !DELIVERY_ID.test(deliveryId)) throw new Reject(`${dialect.deliveryHeader} is missing or malformed`);
    let payload: unknown;
    try {
      payload = JSON.parse(body);
    } catch {
      throw new Reject("body is not JSON");
    }
    const root = object(payload, "payload");
    const action = root["action"];
    if (typeof action === "string" && dialect.ignoredActions.includes(action)) throw new Ignored(`action ${action} is not acted on`);
    if (typeof action !== "string" || !(WORKFLOW_JOB_ACTIONS as readonly string[]).includes(action)) {
      throw new Reject(`action ${JSON.stringify(action)} is not one of ${WORKFLOW_JOB_ACTIONS.join(", ")}`);
    }
    const job = object(root["workflow_job"], "workflow_job");
    const rawLabels = job["labels"];
    if (!Array.isArray(rawLabels) || rawLabels.length > MAX_LABELS) throw new Reject(`workflow_job.labels is not an array of at most ${MAX_LABELS}`);
    const labels = rawLabels.map((l, i) => string(l, `workflow_job.labels[${i}]`));
    const repository = object(root["repository"], "repository");
    const fullName = string(repository["full_name"], "repository.full_name");
    const repoName = string(repository["name"], "repository.name");
    const owner = optionalLogin(repository["owner"], "login", "repository.owner") ?? fullName.split("/")[0] ?? "";
    if (fullName !== `${owner}/${repoName}`) throw new Reject("repository.full_name does not match owner and name");
    const installation = root["installation"];
    const createdAt = optionalTime(job["created_at"], "workflow_job.created_at", dialect.epochIsUnset);
    const startedAt = optionalTime(job["started_at"], "workflow_job.started_at", dialect.epochIsUnset);
    const completedAt = optionalTime(job["completed_at"], "workflow_job.completed_at", dialect.epochIsUnset);
    const event: WorkflowJobEvent = {
      deliveryId,
      action: action as WorkflowJobAction,
      jobId: id(job["id"], "workflow_job.id"),
      runId: id(job["run_id"], "workflow_job.run_id"),
      runAttempt: job["run_attempt"] === undefined ? 1 : id(job["run_attempt"], "workflow_job.run_attempt"),
      jobName: string(job["name"], "workflow_job.name"),
      labels,
      runnerName: nullableString(job["runner_name"], "workflow_job.runner_name"),
      runnerId: nullableId(job["runner_id"], "workflow_job.runner_id"),
      runnerGroupName: nullableString(job["runner_group_name"], "workflow_job.runner_group_name"),
      conclusion: nullableString(job["conclusion"], "workflow_job.conclusion"),
      repository: { owner, name: repoName, fullName },
      organization: optionalLogin(root["organization"], dialect.organizationLogin, "organization"),
      enterprise: optionalLogin(root["enterprise"], "slug", "enterprise"),
      installationId: installation === undefined || installation === null ? undefined : id(object(installation, "installation")["id"], "installation.id"),
      ...(createdAt === undefined ? {} : { createdAt }),
      ...(startedAt === undefined ? {} : { startedAt }),
      ...(completedAt === undefined ? {} : { completedAt }),
    };
    if (event.action === "in_progress" && event.runnerName === null) throw new Reject("an in_progress job has no runner_name");
    // A job that ends without a runner (cancelled while queued) must still say how it ended.
    if (event.action === "completed" && event.runnerName === null && event.conclusion === null) throw new Reject("a completed job has neither a runner_name nor a conclusion");
    return { ok: true, event };
  } catch (err) {
    if (err instanceof Reject) return { ok: false, reason: err.message };
    if (err instanceof Ignored) return { ok: false, reason: err.message, ignored: true };
    throw err;
  }
}
