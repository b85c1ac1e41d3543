import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../shared/index.ts";
import type { VmmFileBound, VmmMemoryUse } from "../vmm/types.ts";
import type { ProcessRef } from "./proc.ts";

/** Files the supervisor keeps in its directory (see docs/supervisor.md). */
export const SUPERVISOR_FILES = {
  socket: "sock",
  identity: "supervisor.json",
  exit: "exit.json",
  lock: "supervisor.lock",
  log: "supervisor.log",
} as const;

/** supervisor.json: who supervises which process, written atomically once the process runs. */
export interface SupervisorIdentity {
  readonly version: 1;
  readonly name: string;
  readonly vmId: string;
  readonly bootId: string;
  readonly supervisor: ProcessRef;
  readonly process: ProcessRef;
  readonly socket: string;
  readonly cgroupMode?: string;
  readonly cgroup?: string;
  readonly startedAt: string;
}

/** How the process ended, as exit.json and the socket's exit event carry it. */
export interface SupervisorExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly at: string;
  readonly memory?: VmmMemoryUse;
}

/** exit.json: how the process ended, written atomically before the exit event is sent. */
export interface ExitRecord extends SupervisorExit {
  readonly name: string;
  readonly vmId: string;
  readonly bootId: string;
  readonly process: ProcessRef;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

export function parseProcessRef(v: unknown): ProcessRef | undefined {
  if (!isObject(v) || !isCount(v.pid) || v.pid === 0 || !isCount(v.startTime)) return undefined;
  return { pid: v.pid, startTime: v.startTime };
}

const optionalString = (v: unknown): v is string | undefined => v === undefined || typeof v === "string";

/** Validates supervisor.json's content; undefined if it is not one. */
export function parseIdentity(v: unknown): SupervisorIdentity | undefined {
  if (!isObject(v) || v.version !== 1) return undefined;
  const supervisor = parseProcessRef(v.supervisor);
  const proc = parseProcessRef(v.process);
  const { name, vmId, bootId, socket, startedAt, cgroupMode, cgroup } = v;
  if (supervisor === undefined || proc === undefined) return undefined;
  if (typeof name !== "string" || typeof vmId !== "string" || typeof bootId !== "string") return undefined;
  if (typeof socket !== "string" || typeof startedAt !== "string" || !optionalString(cgroupMode) || !optionalString(cgroup)) return undefined;
  return {
    version: 1, name, vmId, bootId, supervisor, process: proc, socket, startedAt,
    ...(cgroupMode === undefined ? {} : { cgroupMode }),
    ...(cgroup === undefined ? {} : { cgroup }),
  };
}

/** Validates the exit part shared by exit.json and the socket's exit event. */
export function parseExit(v: unknown): SupervisorExit | undefined {
  if (!isObject(v) || typeof v.at !== "string") return undefined;
  const memory = v.memory === undefined ? undefined : parseMemoryUse(v.memory);
  if (v.memory !== undefined && memory === undefined) return undefined;
  const fileBound = v.fileBound === undefined ? undefined : parseFileBound(v.fileBound);
  if (v.fileBound !== undefined && fileBound === undefined) return undefined;
  const code = v.code === null || v.code === undefined ? null : v.code;
  const signal = v.signal === null || v.signal === undefined ? null : v.signal;
  if (code !== null && !(typeof code === "number" && Number.isInteger(code))) return undefined;
  if (signal !== null && !(typeof signal === "string" && /^SIG[A-Z0-9]+$/.test(signal))) return undefined;
  if ((code === null) === (signal === null)) return undefined; // exactly one of them
  return { code, signal: signal as NodeJS.Signals | null, at: v.at, ...(memory === undefined ? {} : { memory }), ...(fileBound === undefined ? {} : { fileBound }) };
}

function parseFileBound(v: unknown): VmmFileBound | undefined {
  if (!isObject(v) || typeof v.path !== "string" || !isCount(v.bytes) || !isCount(v.maxBytes)) return undefined;
  return { path: v.path, bytes: v.bytes, maxBytes: v.maxBytes };
}

function parseMemoryUse(v: unknown): VmmMemoryUse | undefined {
  if (!isObject(v) || typeof v.oomKilled !== "boolean") return undefined;
  const { peakBytes, limitBytes } = v;
  if ((peakBytes !== undefined && !isCount(peakBytes)) || (limitBytes !== undefined && !isCount(limitBytes))) return undefined;
  return { oomKilled: v.oomKilled, ...(peakBytes === undefined ? {} : { peakBytes }), ...(limitBytes === undefined ? {} : { limitBytes }) };
}

export function parseExitRecord(v: unknown): ExitRecord | undefined {
  const exit = parseExit(v);
  if (exit === undefined || !isObject(v)) return undefined;
  const proc = parseProcessRef(v.process);
  const { name, vmId, bootId } = v;
  if (proc === undefined || typeof name !== "string" || typeof vmId !== "string" || typeof bootId !== "string") return undefined;
  return { ...exit, name, vmId, bootId, process: proc };
}

/** Reads and validates a record file; undefined when it does not exist; throws when it exists but is not valid. */
async function readRecord<T>(path: string, parse: (v: unknown) => T | undefined): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw terminalError("SupervisorRecordInvalid", `Cannot read supervisor record ${path}: it is not JSON`, { cause: err });
  }
  const parsed = parse(value);
  if (parsed === undefined) throw terminalError("SupervisorRecordInvalid", `Cannot read supervisor record ${path}: it is not a valid record`);
  return parsed;
}

export const readIdentity = (dir: string): Promise<SupervisorIdentity | undefined> =>
  readRecord(join(dir, SUPERVISOR_FILES.identity), parseIdentity);

export const readExitRecord = (dir: string): Promise<ExitRecord | undefined> =>
  readRecord(join(dir, SUPERVISOR_FILES.exit), parseExitRecord);

export const sameProcess = (a: ProcessRef, b: ProcessRef): boolean => a.pid === b.pid && a.startTime === b.startTime;
