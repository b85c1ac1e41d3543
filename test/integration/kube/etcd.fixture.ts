// Reaches the dev control plane's etcd directly, to make resourceVersions really expire.
import { readFile } from "node:fs/promises";
import type { ControlPlane } from "../../../src/devcluster/index.ts";

/** Client URL of the plane's etcd, read from the running processes' command lines. */
export async function etcdClientUrl(plane: ControlPlane): Promise<string> {
  const pids = plane.state().pids;
  const wanted: Array<[string, string]> = [
    ["etcd", "--listen-client-urls="],
    ["kube-apiserver", "--etcd-servers="],
  ];
  for (const [name, flag] of wanted) {
    const pid = pids[name];
    if (pid === undefined) continue;
    const args = (await readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0");
    const value = args.find((a) => a.startsWith(flag))?.slice(flag.length).split(",")[0];
    if (value !== undefined && value !== "") return value;
  }
  throw new Error(`Cannot find etcd's client URL: no etcd or kube-apiserver process among ${JSON.stringify(pids)}`);
}

async function post(url: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, { method: "POST", body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  if (!res.ok) throw new Error(`Cannot call ${url}: HTTP ${res.status}: ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/** etcd's current revision (= the newest resourceVersion the API server can have handed out). */
export async function etcdRevision(etcd: string): Promise<number> {
  // Any range request returns the store's revision in its header; the key need not exist.
  const answer = await post(`${etcd}/v3/kv/range`, { key: Buffer.from("/imp-test-probe").toString("base64") });
  const revision = Number((answer["header"] as { revision?: string } | undefined)?.revision);
  if (!Number.isInteger(revision) || revision <= 0) throw new Error(`Cannot read etcd's revision: ${JSON.stringify(answer)}`);
  return revision;
}

/** Compacts etcd's history up to `revision`: every older resourceVersion is gone from etcd. */
export async function compactEtcd(etcd: string, revision: number): Promise<void> {
  await post(`${etcd}/v3/kv/compaction`, { revision: String(revision), physical: true });
}
