/** A comparable picture of a host directory tree (types, modes, owners, contents, link targets), for canary checks. */
import { lstat, readdir, readFile, readlink } from "node:fs/promises";
import { join } from "node:path";

export async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (rel: string): Promise<void> => {
    const abs = join(dir, rel);
    const info = await lstat(abs);
    const head = `${info.mode.toString(8)} ${info.uid}:${info.gid}`;
    if (info.isSymbolicLink()) out[rel] = `${head} -> ${await readlink(abs)}`;
    else if (info.isFile()) out[rel] = `${head} ${(await readFile(abs)).toString("base64")}`;
    else out[rel] = head;
    if (info.isDirectory()) for (const name of (await readdir(abs)).sort()) await walk(rel === "" ? name : `${rel}/${name}`);
  };
  await walk("");
  return out;
}
