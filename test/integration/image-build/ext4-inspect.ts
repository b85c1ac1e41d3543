/**
 * Reads a built ext4 image from outside, without mounting it: debugfs for metadata (`ls -p`, `stat`)
 * and `rdump` for file contents and symlink targets. Produces the same record shape as `hostTree`
 * so an image can be compared with a directory unpacked by another tool (umoci).
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** One path of a tree, in a form both sides can produce. */
export interface NodeRecord {
  /** Octal mode including the file type bits. */
  readonly mode: string;
  readonly uid: number;
  readonly gid: number;
  /** Regular files: sha256 of the content; symlinks: the target; devices: "major:minor". */
  readonly data?: string;
  /** Hard-link group: the first path (sorted) sharing this inode, when more than one does. */
  readonly linkGroup?: string;
}

export function debugfs(image: string, request: string): string {
  return execFileSync("debugfs", ["-R", request, image], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], maxBuffer: 64 * 1024 * 1024 });
}

interface Raw {
  readonly ino: number;
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
}

/** Every path in the image (relative, no leading slash) with its raw metadata, via breadth-first `ls -p`. */
export function ext4Metadata(image: string): Map<string, Raw> {
  const found = new Map<string, Raw>();
  let level = [""];
  while (level.length > 0) {
    const script = join(mkdtempSync(join(tmpdir(), "imp-dbfs-")), "s");
    writeFileSync(script, level.map((d) => `ls -p "/${d}"`).join("\n") + "\n");
    const out = execFileSync("debugfs", ["-f", script, image], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], maxBuffer: 64 * 1024 * 1024 });
    rmSync(join(script, ".."), { recursive: true });
    const next: string[] = [];
    let dir = "";
    for (const line of out.split("\n")) {
      const header = /^debugfs: ls -p "\/(.*)"$/.exec(line);
      if (header !== null) {
        dir = header[1] ?? "";
        continue;
      }
      const m = /^\/(\d+)\/(\d+)\/(\d+)\/(\d+)\/(.*)\/(\d*)\/$/.exec(line);
      if (m === null) continue;
      const name = m[5] ?? "";
      if (name === "." || name === "..") continue;
      const path = dir === "" ? name : `${dir}/${name}`;
      const raw = { ino: Number(m[1]), mode: parseInt(m[2] ?? "0", 8), uid: Number(m[3]), gid: Number(m[4]) };
      found.set(path, raw);
      if ((raw.mode & 0o170000) === 0o040000) next.push(path);
    }
    level = next;
  }
  return found;
}

/** The image as comparable records (content from `rdump`, device numbers from `stat`). */
export function ext4Tree(image: string): Map<string, NodeRecord> {
  const meta = ext4Metadata(image);
  const dump = mkdtempSync(join(tmpdir(), "imp-rdump-"));
  try {
    execFileSync("debugfs", ["-R", `rdump / ${dump}`, image], { stdio: "ignore" });
    return toRecords(meta, (path, raw) => {
      const type = raw.mode & 0o170000;
      if (type === 0o100000) return sha(readFileSync(join(dump, path)));
      if (type === 0o120000) return readlinkSync(join(dump, path));
      if (type === 0o020000 || type === 0o060000) {
        const m = /Device major\/minor number: (\d+):(\d+)/.exec(debugfs(image, `stat "/${path}"`));
        return m === null ? "?" : `${Number(m[1])}:${Number(m[2])}`;
      }
      return undefined;
    });
  } finally {
    rmSync(dump, { recursive: true, force: true });
  }
}

/** A host directory as comparable records. */
export function hostTree(root: string): Map<string, NodeRecord> {
  const meta = new Map<string, Raw & { rdev: number }>();
  const walk = (rel: string): void => {
    for (const name of readdirSync(join(root, rel))) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const info = lstatSync(join(root, path));
      meta.set(path, { ino: info.ino, mode: info.mode, uid: info.uid, gid: info.gid, rdev: info.rdev });
      if (info.isDirectory()) walk(path);
    }
  };
  walk("");
  return toRecords(meta, (path, raw) => {
    const type = raw.mode & 0o170000;
    if (type === 0o100000) return sha(readFileSync(join(root, path)));
    if (type === 0o120000) return readlinkSync(join(root, path));
    if (type === 0o020000 || type === 0o060000) {
      const rdev = (raw as Raw & { rdev: number }).rdev;
      return `${(rdev >> 8) & 0xfff}:${(rdev & 0xff) | ((rdev >> 12) & 0xfff00)}`;
    }
    return undefined;
  });
}

function toRecords<R extends Raw>(meta: Map<string, R>, dataOf: (path: string, raw: R) => string | undefined): Map<string, NodeRecord> {
  const byIno = new Map<number, string[]>();
  for (const [path, raw] of meta) if ((raw.mode & 0o170000) !== 0o040000) byIno.set(raw.ino, [...(byIno.get(raw.ino) ?? []), path]);
  const out = new Map<string, NodeRecord>();
  for (const [path, raw] of [...meta].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const group = byIno.get(raw.ino);
    const data = dataOf(path, raw);
    out.set(path, {
      mode: raw.mode.toString(8),
      uid: raw.uid,
      gid: raw.gid,
      ...(data === undefined ? {} : { data }),
      ...(group !== undefined && group.length > 1 ? { linkGroup: [...group].sort()[0] ?? "" } : {}),
    });
  }
  return out;
}

const sha = (bytes: Buffer): string => createHash("sha256").update(bytes).digest("hex").slice(0, 16);
