import { request } from "node:https";
import { readFile } from "node:fs/promises";
import type { Pki } from "./pki.ts";

/** Client TLS material for probing the API server as the admin user. */
export interface ProbeTls {
  readonly ca: Buffer;
  readonly cert: Buffer;
  readonly key: Buffer;
}

export async function loadProbeTls(pki: Pki): Promise<ProbeTls> {
  const [ca, cert, key] = await Promise.all([readFile(pki.caCert), readFile(pki.adminCert), readFile(pki.adminKey)]);
  return { ca, cert, key };
}

/** GET over TLS with a short per-request timeout; resolves with the status code and body, or undefined when unreachable. */
export function httpsGet(url: string, tls: ProbeTls | "insecure", timeoutMs = 2_000): Promise<{ status: number; body: string } | undefined> {
  return new Promise((resolve) => {
    const options = tls === "insecure" ? { rejectUnauthorized: false } : { ca: tls.ca, cert: tls.cert, key: tls.key };
    const req = request(url, { ...options, timeout: timeoutMs }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        if (body.length < 64 * 1024) body += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      res.on("error", () => resolve(undefined));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(undefined));
    req.end();
  });
}

/** etcd's health endpoint, over TLS with a client certificate (etcd requires one). */
export async function etcdHealthy(clientPort: number, tls: ProbeTls): Promise<boolean> {
  const res = await httpsGet(`https://127.0.0.1:${clientPort}/health`, tls);
  if (res?.status !== 200) return false;
  try {
    return (JSON.parse(res.body) as { health?: unknown }).health === "true";
  } catch {
    return false;
  }
}
