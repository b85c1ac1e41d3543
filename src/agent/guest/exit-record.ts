/**
 * Exit records: the workload's exit as the guest agent wrote it to the console, authenticated with a
 * per-boot key the host gave it in `configure` (docs/guest-protocol.md, "Exit records"). A restarted
 * agent that finds the VM already ended trusts only these: a console line the job wrote itself does
 * not verify, and the first valid record for the exec id wins, so nothing written after the real
 * exit changes it. Format and MAC match guest/internal/exitrecord; both test against
 * testdata/protocol/exit-records.json.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { open } from "node:fs/promises";
import { StringDecoder } from "node:string_decoder";

export const EXIT_RECORD_PREFIX = "imp-exit-record/1";
export const EXIT_RECORD_KEY_BYTES = 32;

export interface WorkloadExitRecord {
  readonly execId: string;
  readonly exitCode: number;
  readonly signal?: string;
}

/** A fresh per-boot key (kept by the host in the VM directory, given to the guest in `configure`). */
export function newExitRecordKey(): Buffer {
  return randomBytes(EXIT_RECORD_KEY_BYTES);
}

function mac(key: Uint8Array, payload: string): Buffer {
  return createHmac("sha256", key).update(`${EXIT_RECORD_PREFIX} ${payload}`).digest();
}

/** Formats a record line as the guest writes it (tests and fakes; the guest agent is the writer). */
export function exitRecordLine(key: Uint8Array, record: WorkloadExitRecord): string {
  const payload = Buffer.from(JSON.stringify({ execId: record.execId, exitCode: record.exitCode, ...(record.signal === undefined ? {} : { signal: record.signal }) })).toString("base64url");
  return `${EXIT_RECORD_PREFIX} ${payload} ${mac(key, payload).toString("base64url")}`;
}

/** The record a line states, when the line is a well-formed record authenticated with `key`. */
export function verifyExitRecord(key: Uint8Array, line: string): WorkloadExitRecord | undefined {
  const fields = line.trim().split(/[ \t]+/);
  if (fields.length !== 3 || fields[0] !== EXIT_RECORD_PREFIX || key.length !== EXIT_RECORD_KEY_BYTES) return undefined;
  const [, payload = "", tag = ""] = fields;
  if (!/^[A-Za-z0-9_-]+$/.test(payload) || !/^[A-Za-z0-9_-]+$/.test(tag)) return undefined;
  const got = Buffer.from(tag, "base64url");
  const want = mac(key, payload);
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.execId !== "string" || v.execId === "" || typeof v.exitCode !== "number" || !Number.isInteger(v.exitCode) || v.exitCode < 0 || v.exitCode > 255) return undefined;
  if (v.signal !== undefined && (typeof v.signal !== "string" || !/^SIG[A-Z0-9]{1,12}$/.test(v.signal))) return undefined;
  return { execId: v.execId, exitCode: v.exitCode, ...(typeof v.signal === "string" ? { signal: v.signal } : {}) };
}

/**
 * The first valid record for `execId` in the console file at `path`, reading at most `maxBytes`
 * from its start (the console cap: a guest that wrote more was stopped for flooding). Lines are
 * untrusted text of any length; only lines starting with the prefix are looked at, and a line longer
 * than any record could be is skipped. Undefined when there is none (or no file).
 */
export async function firstExitRecord(path: string, key: Uint8Array, execId: string, maxBytes: number): Promise<WorkloadExitRecord | undefined> {
  let handle;
  try {
    handle = await open(path, "r");
  } catch {
    return undefined;
  }
  try {
    const decoder = new StringDecoder("utf8");
    const chunk = Buffer.alloc(64 * 1024);
    let offset = 0;
    let partial = "";
    for (;;) {
      const { bytesRead } = await handle.read(chunk, 0, Math.min(chunk.length, maxBytes - offset), offset);
      const text = bytesRead === 0 ? decoder.end() : decoder.write(chunk.subarray(0, bytesRead));
      offset += bytesRead;
      const lines = (partial + text).split("\n");
      partial = bytesRead === 0 || offset >= maxBytes ? "" : (lines.pop() ?? "");
      if (partial.length > MAX_RECORD_LINE) partial = "";
      for (const line of lines) {
        const at = line.indexOf(EXIT_RECORD_PREFIX);
        if (at < 0 || line.length - at > MAX_RECORD_LINE) continue;
        const record = verifyExitRecord(key, line.slice(at));
        if (record?.execId === execId) return record;
      }
      if (bytesRead === 0 || offset >= maxBytes) return undefined;
    }
  } finally {
    await handle.close();
  }
}

/** Longer than any record: an exec id is ≤ 128 characters, the rest is fixed. */
const MAX_RECORD_LINE = 1024;
