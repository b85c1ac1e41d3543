/**
 * The runner scale-set API's shapes, read at the boundary. Everything here comes from the network
 * and is checked before use: a wrong or missing field is `ActionsServiceUnexpectedResponse`, never
 * a crash later. Field names are those `github.com/actions/scaleset` (types.go) uses; like Go's
 * decoder, a name matches case-insensitively (the service writes `RunnerSetting` with a capital R).
 */
import { terminalError } from "../../../shared/index.ts";
import { CredentialText } from "../credential-text.ts";
import { RunnerJitConfig } from "../jit-config.ts";
import { ScaleSetErrorCode } from "./errors.ts";

type Json = Record<string, unknown>;

export interface ScaleSetLabel {
  readonly type: string;
  readonly name: string;
}

/** `RunnerScaleSetStatistic`: the seven counters every session and message carries. */
export interface ScaleSetStatistics {
  readonly totalAvailableJobs: number;
  readonly totalAcquiredJobs: number;
  /** Jobs acquired by the scale set and not completed: waiting for a runner or running. The scaling signal. */
  readonly totalAssignedJobs: number;
  readonly totalRunningJobs: number;
  readonly totalRegisteredRunners: number;
  readonly totalBusyRunners: number;
  readonly totalIdleRunners: number;
}

export interface RunnerScaleSet {
  readonly id: number;
  readonly name: string;
  readonly runnerGroupId: number;
  readonly labels: readonly ScaleSetLabel[];
}

export interface ScaleSetSession {
  readonly id: string;
  readonly ownerName: string;
  readonly scaleSetId: number;
  /** Absolute URL of the session's message queue. */
  readonly queueUrl: string;
  /** The queue token: authenticates the queue and acquirejobs. Never logged. */
  readonly queueToken: CredentialText;
  readonly statistics: ScaleSetStatistics;
}

interface JobMessageBase {
  readonly runnerRequestId: number;
  readonly repositoryName: string;
  readonly ownerName: string;
  readonly jobId: string;
  readonly jobDisplayName: string;
  readonly jobWorkflowRef: string;
  readonly workflowRunId: number;
  readonly eventName: string;
  readonly requestLabels: readonly string[];
  /** ms since the epoch; undefined for Go's zero time or an absent field. */
  readonly queueTime: number | undefined;
  readonly scaleSetAssignTime: number | undefined;
  readonly runnerAssignTime: number | undefined;
  readonly finishTime: number | undefined;
}

export type JobMessage =
  | (JobMessageBase & { readonly messageType: "JobAvailable" })
  | (JobMessageBase & { readonly messageType: "JobAssigned" })
  | (JobMessageBase & { readonly messageType: "JobStarted"; readonly runnerId: number; readonly runnerName: string })
  | (JobMessageBase & { readonly messageType: "JobCompleted"; readonly result: string; readonly runnerId: number; readonly runnerName: string });

export interface ScaleSetMessage {
  readonly id: number;
  readonly statistics: ScaleSetStatistics;
  /** In the order the service sent them; unknown types are skipped, as the Go listener does. */
  readonly jobs: readonly JobMessage[];
}

export interface ScaleSetJitConfig {
  readonly runnerId: number;
  readonly runnerName: string;
  readonly encodedJitConfig: RunnerJitConfig;
}

export interface RunnerReference {
  readonly id: number;
  readonly name: string;
  readonly scaleSetId: number | undefined;
}

/** The most job messages one message may carry before it is refused as hostile (GitHub sends at most 50). */
export const MAX_JOBS_PER_MESSAGE = 1000;

function unexpected(what: string, problem: string): never {
  throw terminalError(ScaleSetErrorCode.UnexpectedResponse, `Cannot read ${what}: the Actions service's response ${problem}`);
}

function asObject(value: unknown, what: string): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value)) unexpected(what, "is not a JSON object");
  return value as Json;
}

/** Go's encoding/json matches names case-insensitively; so do we (exact match first). */
function get(obj: Json, key: string): unknown {
  if (key in obj) return obj[key];
  const lower = key.toLowerCase();
  const found = Object.keys(obj).find((k) => k.toLowerCase() === lower);
  return found === undefined ? undefined : obj[found];
}

function num(obj: Json, key: string, what: string): number {
  const v = get(obj, key);
  if (typeof v !== "number" || !Number.isSafeInteger(v)) unexpected(what, `has no integer "${key}"`);
  return v;
}

function count(obj: Json, key: string, what: string): number {
  const v = num(obj, key, what);
  if (v < 0) unexpected(what, `has a negative "${key}"`);
  return v;
}

function str(obj: Json, key: string, what: string, max = 4096): string {
  const v = get(obj, key);
  if (typeof v !== "string" || v.length > max) unexpected(what, `has no string "${key}" of at most ${max} characters`);
  return v;
}

function optStr(obj: Json, key: string, max = 4096): string {
  const v = get(obj, key);
  return typeof v === "string" ? v.slice(0, max) : "";
}

function optNum(obj: Json, key: string): number | undefined {
  const v = get(obj, key);
  return typeof v === "number" && Number.isSafeInteger(v) ? v : undefined;
}

/** RFC 3339 time to ms; Go's zero time (year 1) and anything unreadable are "not set". */
function time(obj: Json, key: string): number | undefined {
  const v = get(obj, key);
  if (typeof v !== "string") return undefined;
  const ms = Date.parse(v);
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

export function parseStatistics(value: unknown, what = "scale set statistics"): ScaleSetStatistics {
  const o = asObject(value, what);
  return {
    totalAvailableJobs: count(o, "totalAvailableJobs", what),
    totalAcquiredJobs: count(o, "totalAcquiredJobs", what),
    totalAssignedJobs: count(o, "totalAssignedJobs", what),
    totalRunningJobs: count(o, "totalRunningJobs", what),
    totalRegisteredRunners: count(o, "totalRegisteredRunners", what),
    totalBusyRunners: count(o, "totalBusyRunners", what),
    totalIdleRunners: count(o, "totalIdleRunners", what),
  };
}

export function parseScaleSet(value: unknown, what = "runner scale set"): RunnerScaleSet {
  const o = asObject(value, what);
  const labels = get(o, "labels");
  return {
    id: num(o, "id", what),
    name: str(o, "name", what, 256),
    runnerGroupId: optNum(o, "runnerGroupId") ?? 1,
    labels: Array.isArray(labels) ? labels.slice(0, 256).map((l) => ({ type: optStr(asObject(l, `${what} label`), "type", 64), name: str(asObject(l, `${what} label`), "name", `${what} label`, 256) })) : [],
  };
}

/** `{count, value: [...]}`; trusts `count` as the Go client does, and refuses a count that `value` does not back. */
export function parseList<T>(value: unknown, what: string, item: (v: unknown) => T): T[] {
  const o = asObject(value, what);
  const n = count(o, "count", what);
  const items = get(o, "value");
  if (n === 0) return [];
  if (!Array.isArray(items) || items.length < n) unexpected(what, `says count ${n} but its "value" holds fewer`);
  return items.slice(0, n).map(item);
}

export function parseSession(value: unknown, scaleSetId: number): ScaleSetSession {
  const what = "message session";
  const o = asObject(value, what);
  const id = str(o, "sessionId", what, 64);
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id) || /^[0-]+$/.test(id)) unexpected(what, "has no session id (a non-nil UUID)");
  const queueUrl = str(o, "messageQueueUrl", what, 2048);
  if (!/^https?:\/\//.test(queueUrl)) unexpected(what, "has no absolute messageQueueUrl");
  const queueToken = str(o, "messageQueueAccessToken", what, 8192);
  if (queueToken === "") unexpected(what, "has no messageQueueAccessToken");
  return { id, ownerName: optStr(o, "ownerName", 256), scaleSetId, queueUrl, queueToken: new CredentialText(queueToken, "message queue token"), statistics: parseStatistics(get(o, "statistics"), `${what} statistics`) };
}

const JOB_TYPES = new Set(["JobAvailable", "JobAssigned", "JobStarted", "JobCompleted"]);

function parseJob(value: unknown): JobMessage | undefined {
  const what = "job message";
  const o = asObject(value, what);
  const type = get(o, "messageType");
  if (typeof type !== "string" || !JOB_TYPES.has(type)) return undefined;
  const labels = get(o, "requestLabels");
  const base: JobMessageBase = {
    runnerRequestId: num(o, "runnerRequestId", what),
    repositoryName: optStr(o, "repositoryName", 256),
    ownerName: optStr(o, "ownerName", 256),
    jobId: optStr(o, "jobId", 256),
    jobDisplayName: optStr(o, "jobDisplayName", 1024),
    jobWorkflowRef: optStr(o, "jobWorkflowRef", 2048),
    workflowRunId: optNum(o, "workflowRunId") ?? 0,
    eventName: optStr(o, "eventName", 128),
    requestLabels: Array.isArray(labels) ? labels.filter((l): l is string => typeof l === "string").slice(0, 256).map((l) => l.slice(0, 256)) : [],
    queueTime: time(o, "queueTime"),
    scaleSetAssignTime: time(o, "scaleSetAssignTime"),
    runnerAssignTime: time(o, "runnerAssignTime"),
    finishTime: time(o, "finishTime"),
  };
  switch (type) {
    case "JobStarted":
      return { ...base, messageType: type, runnerId: optNum(o, "runnerId") ?? 0, runnerName: optStr(o, "runnerName", 256) };
    case "JobCompleted":
      return { ...base, messageType: type, result: optStr(o, "result", 64), runnerId: optNum(o, "runnerId") ?? 0, runnerName: optStr(o, "runnerName", 256) };
    default:
      return { ...base, messageType: type as "JobAvailable" | "JobAssigned" };
  }
}

/** The queue's 200: an envelope whose `body` is a string holding a JSON array of job messages. */
export function parseMessage(value: unknown): ScaleSetMessage {
  const what = "queue message";
  const o = asObject(value, what);
  const type = str(o, "messageType", what, 128);
  if (type !== "RunnerScaleSetJobMessages") unexpected(what, `has messageType ${JSON.stringify(type.slice(0, 64))}, not RunnerScaleSetJobMessages`);
  const body = optStr(o, "body", 16 * 1024 * 1024);
  let jobs: unknown[] = [];
  if (body !== "") {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      unexpected(what, "has a body that is not JSON");
    }
    if (!Array.isArray(parsed)) unexpected(what, "has a body that is not a JSON array");
    if (parsed.length > MAX_JOBS_PER_MESSAGE) unexpected(what, `carries ${parsed.length} job messages (more than ${MAX_JOBS_PER_MESSAGE})`);
    jobs = parsed;
  }
  return { id: num(o, "messageId", what), statistics: parseStatistics(get(o, "statistics"), `${what} statistics`), jobs: jobs.map(parseJob).filter((j): j is JobMessage => j !== undefined) };
}

export function parseJitConfig(value: unknown): ScaleSetJitConfig {
  const what = "scale set runner configuration";
  const o = asObject(value, what);
  const runner = asObject(get(o, "runner"), `${what} runner`);
  const encodedJitConfig = str(o, "encodedJITConfig", what, 64 * 1024);
  if (encodedJitConfig === "") unexpected(what, "has an empty encodedJITConfig");
  return { runnerId: num(runner, "id", what), runnerName: str(runner, "name", what, 256), encodedJitConfig: new RunnerJitConfig(encodedJitConfig) };
}

export function parseRunnerReference(value: unknown): RunnerReference {
  const what = "runner reference";
  const o = asObject(value, what);
  return { id: num(o, "id", what), name: str(o, "name", what, 256), scaleSetId: optNum(o, "runnerScaleSetId") };
}

export function parseAcquired(value: unknown): number[] {
  return parseList(value, "acquired jobs", (v) => {
    if (typeof v !== "number" || !Number.isSafeInteger(v)) unexpected("acquired jobs", "holds a value that is not an integer");
    return v;
  });
}
