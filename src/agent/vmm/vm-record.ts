/**
 * What a driver needs to re-adopt a running VM after the agent restarted, kept as `vm.json` in the
 * VM's directory: the spec it was started with, which driver started it and the guest channel. No
 * secrets: the spec is what the VMM's own command line already shows. Both drivers write this one
 * format, so whoever adopts can read a VM's driver kind before it
 * picks the driver.
 */
import { open, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../shared/index.ts";
import type { VmmKind, VmSpec } from "./types.ts";

export const VM_RECORD_FILE = "vm.json";
const VERSION = 1;

export interface VmRecord {
  readonly version: 1;
  readonly driver: VmmKind;
  /** The guest channel the VM was started with (`vsock` or `serial`). */
  readonly channel: "vsock" | "serial";
  readonly spec: VmSpec;
}

export function vmRecordPath(dir: string): string {
  return join(dir, VM_RECORD_FILE);
}

/**
 * Writes the record atomically (temporary file, fsync, rename, fsync of the directory): a reader,
 * or a crash, sees no record or the whole record, never half of one.
 */
export async function writeVmRecord(dir: string, record: Omit<VmRecord, "version">): Promise<void> {
  const path = vmRecordPath(dir);
  const temporary = `${path}.${process.pid}.tmp`;
  const file = await open(temporary, "w", 0o600);
  try {
    await file.writeFile(`${JSON.stringify({ version: VERSION, ...record })}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
  try {
    await rename(temporary, path);
  } catch (err) {
    await rm(temporary, { force: true });
    throw err;
  }
  const directory = await open(dir, "r");
  try {
    await directory.sync();
  } finally {
    await directory.close();
  }
}

export async function removeVmRecord(dir: string): Promise<void> {
  await rm(vmRecordPath(dir), { force: true });
}

/** The record in `dir`, or undefined when there is none. A record that does not parse is a terminal error. */
export async function readVmRecord(dir: string): Promise<VmRecord | undefined> {
  const path = vmRecordPath(dir);
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
    throw terminalError("VmRecordInvalid", `Cannot read VM record ${path}: not JSON`, { cause: err });
  }
  const problem = recordProblem(value);
  if (problem !== undefined) throw terminalError("VmRecordInvalid", `Cannot read VM record ${path}: ${problem}`);
  return value as VmRecord;
}

/** Why `value` is not a {@link VmRecord} of this version, or undefined. Checks what adopt relies on. */
function recordProblem(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null) return "not an object";
  const r = value as Record<string, unknown>;
  if (r.version !== VERSION) return `version ${JSON.stringify(r.version)}, expected ${VERSION}`;
  if (r.driver !== "qemu" && r.driver !== "firecracker") return `unknown driver ${JSON.stringify(r.driver)}`;
  if (r.channel !== "vsock" && r.channel !== "serial") return `unknown channel ${JSON.stringify(r.channel)}`;
  const s = r.spec as Record<string, unknown> | undefined;
  if (typeof s !== "object" || s === null) return "no spec";
  for (const key of ["name", "dir", "kernel", "cmdline"]) if (typeof s[key] !== "string") return `spec.${key} is not a string`;
  for (const key of ["vcpus", "memoryMiB", "guestCid"]) if (!Number.isInteger(s[key])) return `spec.${key} is not an integer`;
  if (s.initrd !== undefined && typeof s.initrd !== "string") return "spec.initrd is not a string";
  if (!Array.isArray(s.drives)) return "spec.drives is not a list";
  for (const d of s.drives as unknown[]) {
    const drive = d as Record<string, unknown> | null;
    if (typeof drive !== "object" || drive === null || typeof drive.id !== "string" || typeof drive.path !== "string" || typeof drive.readOnly !== "boolean" || typeof drive.isRoot !== "boolean" || (drive.format !== undefined && drive.format !== "raw" && drive.format !== "qcow2") || (drive.backing !== undefined && typeof drive.backing !== "string")) {
      return "spec.drives holds an entry that is not a drive";
    }
  }
  if (s.network !== undefined) {
    const n = s.network as Record<string, unknown> | null;
    if (typeof n !== "object" || n === null || typeof n.tap !== "string" || typeof n.mac !== "string") return "spec.network is not a tap and a MAC";
  }
  return undefined;
}
