import { parseExit, parseProcessRef, type SupervisorExit } from "./records.ts";
import type { ProcessRef } from "./proc.ts";

/**
 * The supervisor's socket protocol: newline-delimited JSON, each line at most {@link MAX_LINE} bytes
 * in either direction. The supervisor greets with `hello` (the status), answers `status` and `signal`
 * requests with `reply`, and sends `exit` to every connection, then closes it, when the process exits.
 */
export const MAX_LINE = 4096;

export interface SupervisorStatus {
  readonly name: string;
  readonly vmId: string;
  readonly state: "running" | "exited";
  readonly process: ProcessRef;
  readonly supervisor: ProcessRef;
  readonly startedAt: string;
  readonly exit?: SupervisorExit;
}

export type SupervisorMessage =
  | { readonly type: "hello"; readonly status: SupervisorStatus }
  | { readonly type: "exit"; readonly status: SupervisorStatus }
  | { readonly type: "reply"; readonly id?: number; readonly ok: boolean; readonly error?: string; readonly status?: SupervisorStatus };

export type SupervisorRequest =
  | { readonly id: number; readonly op: "status" }
  | { readonly id: number; readonly op: "signal"; readonly signal: NodeJS.Signals };

export function encodeRequest(request: SupervisorRequest): string {
  return `${JSON.stringify(request)}\n`;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

function parseStatus(v: unknown): SupervisorStatus | undefined {
  if (!isObject(v)) return undefined;
  const proc = parseProcessRef(v.process);
  const supervisor = parseProcessRef(v.supervisor);
  const { name, vmId, state, startedAt } = v;
  if (proc === undefined || supervisor === undefined || typeof name !== "string" || typeof vmId !== "string") return undefined;
  if ((state !== "running" && state !== "exited") || typeof startedAt !== "string") return undefined;
  if (v.exit === undefined) return state === "running" ? { name, vmId, state, process: proc, supervisor, startedAt } : undefined;
  const exit = parseExit(v.exit);
  if (exit === undefined || state !== "exited") return undefined;
  return { name, vmId, state, process: proc, supervisor, startedAt, exit };
}

/** One line from the supervisor; undefined if it is not a message of the protocol. */
export function parseMessage(line: string): SupervisorMessage | undefined {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (!isObject(v)) return undefined;
  if (v.type === "hello" || v.type === "exit") {
    const status = parseStatus(v.status);
    if (status === undefined || (v.type === "exit" && status.exit === undefined)) return undefined;
    return { type: v.type, status };
  }
  if (v.type !== "reply" || typeof v.ok !== "boolean") return undefined;
  const id = typeof v.id === "number" ? v.id : undefined;
  const error = typeof v.error === "string" ? v.error : undefined;
  const status = v.status === undefined ? undefined : parseStatus(v.status);
  return { type: "reply", ok: v.ok, ...(id === undefined ? {} : { id }), ...(error === undefined ? {} : { error }), ...(status === undefined ? {} : { status }) };
}

/**
 * Splits a byte stream into lines, refusing any line longer than {@link MAX_LINE} (the supervisor
 * never sends one, so a longer line means the peer is not our supervisor).
 */
export class LineDecoder {
  #buffer = "";

  /** Returns the complete lines in `chunk`; throws once a line exceeds the bound. */
  push(chunk: string): string[] {
    this.#buffer += chunk;
    const lines = this.#buffer.split("\n");
    this.#buffer = lines.pop() ?? "";
    if (Buffer.byteLength(this.#buffer) >= MAX_LINE || lines.some((l) => Buffer.byteLength(l) >= MAX_LINE)) {
      throw new Error(`line longer than ${MAX_LINE} bytes`);
    }
    return lines;
  }
}
