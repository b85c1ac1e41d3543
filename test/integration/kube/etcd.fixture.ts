// Reaches the dev control plane's etcd directly (its JSON gateway, over TLS with the plane's client
// certificate), to make resourceVersions really expire.
import { readFile } from "node:fs/promises";
import { request } from "node:https";
import type { ControlPlane, EtcdEndpoint } from "../../../src/devcluster/index.ts";

/** The plane's etcd endpoint. */
export function etcdEndpoint(plane: ControlPlane): EtcdEndpoint {
  return plane.etcd;
}

async function post(etcd: EtcdEndpoint, path: string, body: unknown): Promise<Record<string, unknown>> {
  const [ca, cert, key] = await Promise.all([readFile(etcd.caCert), readFile(etcd.clientCert), readFile(etcd.clientKey)]);
  const url = `${etcd.url}${path}`;
  const text = await new Promise<string>((resolve, reject) => {
    const req = request(url, { method: "POST", ca, cert, key, timeout: 10_000 }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (data += chunk));
      res.on("end", () => (res.statusCode === 200 ? resolve(data) : reject(new Error(`Cannot call ${url}: HTTP ${res.statusCode}: ${data}`))));
    });
    req.on("timeout", () => req.destroy(new Error(`Cannot call ${url}: no answer within 10 s`)));
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
  return JSON.parse(text) as Record<string, unknown>;
}

/** etcd's current revision (= the newest resourceVersion the API server can have handed out). */
export async function etcdRevision(etcd: EtcdEndpoint): Promise<number> {
  // Any range request returns the store's revision in its header; the key need not exist.
  const answer = await post(etcd, "/v3/kv/range", { key: Buffer.from("/imp-test-probe").toString("base64") });
  const revision = Number((answer["header"] as { revision?: string } | undefined)?.revision);
  if (!Number.isInteger(revision) || revision <= 0) throw new Error(`Cannot read etcd's revision: ${JSON.stringify(answer)}`);
  return revision;
}

/** Compacts etcd's history up to `revision`: every older resourceVersion is gone from etcd. */
export async function compactEtcd(etcd: EtcdEndpoint, revision: number): Promise<void> {
  await post(etcd, "/v3/kv/compaction", { revision: String(revision), physical: true });
}
