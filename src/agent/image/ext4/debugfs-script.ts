/**
 * Pure generation of the debugfs script that adds what a host directory cannot carry into the image:
 * device nodes and FIFOs (never created on the host) and extended attributes (Node has no setxattr).
 * Paths were validated at extraction (printable ASCII, no quotes or backslashes), so quoting them in
 * double quotes cannot be escaped; this module checks again and refuses anything else.
 */
import type { SpecialNode } from "../layers/index.ts";
import { terminalError } from "../../../shared/index.ts";

const TYPE_BITS = { char: 0o020000, block: 0o060000, fifo: 0o010000 } as const;
const SAFE = /^[\x20-\x7e]+$/;

/** One xattr value to set, read by debugfs from `valueFile`. */
export interface XattrFix {
  readonly path: string;
  readonly name: string;
  readonly valueFile: string;
}

/** The debugfs commands (one per line) that turn placeholders into nodes and set xattrs. */
export function debugfsScript(specials: ReadonlyMap<string, SpecialNode>, xattrs: readonly XattrFix[], dirMtimes: ReadonlyMap<string, number> = new Map()): string {
  const lines: string[] = [];
  for (const [path, node] of specials) {
    const slash = path.lastIndexOf("/");
    const dir = slash < 0 ? "/" : `/${path.slice(0, slash)}`;
    const name = path.slice(slash + 1);
    const p = quote(path);
    lines.push(`rm ${p}`, `cd ${quote(dir)}`);
    lines.push(node.kind === "fifo" ? `mknod ${quote(name)} p` : `mknod ${quote(name)} ${node.kind === "char" ? "c" : "b"} ${node.major} ${node.minor}`);
    lines.push("cd /");
    lines.push(`sif ${p} mode 0${(TYPE_BITS[node.kind] | (node.mode & 0o7777)).toString(8)}`);
    lines.push(`sif ${p} uid ${node.uid}`, `sif ${p} gid ${node.gid}`);
    const seconds = Math.floor(node.mtime);
    for (const field of ["mtime", "atime", "ctime"]) lines.push(`sif ${p} ${field} @${seconds}`);
  }
  for (const fix of xattrs) lines.push(`ea_set -f ${quote(fix.valueFile)} ${quote(fix.path)} ${quote(fix.name)}`);
  // mknod inside a directory changed its mtime; put back the one its layer gave it.
  for (const [dir, mtime] of dirMtimes) lines.push(`sif ${quote(`/${dir}`)} mtime @${Math.floor(mtime)}`);
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

function quote(value: string): string {
  if (!SAFE.test(value) || /["\\]/.test(value)) {
    throw terminalError("UnsafeDebugfsArgument", `Cannot write the debugfs script: ${JSON.stringify(value)} is not printable ASCII without quotes`);
  }
  return `"${value}"`;
}

/**
 * debugfs exits 0 even when a command fails; its errors are the stderr lines other than its banner.
 * Returns those lines (empty when every command worked).
 */
export function debugfsErrors(stderr: string): string[] {
  return stderr.split("\n").map((line) => line.trim()).filter((line) => line !== "" && !/^debugfs \d+\.\d+/.test(line));
}
