/**
 * Sequential GETs against a real kube-apiserver on loopback: plain client-node 2.0.1 (a new undici
 * Agent, hence a new TLS connection, per request) against src/kube's ResourceClient (one shared
 * dispatcher per KubeConfig). Prints new connections opened by this process and time per request.
 *
 *   node bench/kube-client.ts [--requests 200]
 */
import { execFileSync } from "node:child_process";
import { parseArgs } from "node:util";
import { CoreV1Api } from "@kubernetes/client-node";
import { startControlPlane } from "../src/devcluster/index.ts";
import { createResourceClient, type KubeObject } from "../src/kube/index.ts";

const { values } = parseArgs({ options: { requests: { type: "string", default: "200" } } });
const requests = Number(values.requests);

const plane = await startControlPlane({ controllerManager: false });
try {
  const port = new URL(plane.server).port;
  const ownConnections = (): number =>
    execFileSync("ss", ["-tnpH", "state", "all", `( dport = :${port} )`])
      .toString()
      .split("\n")
      .filter((line) => line.includes(`pid=${process.pid},`)).length;
  const core = plane.kubeConfig.makeApiClient(CoreV1Api);
  const namespaces = createResourceClient<KubeObject>(plane.kubeConfig, { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false });
  const candidates: ReadonlyArray<[string, () => Promise<unknown>]> = [
    ["client-node CoreV1Api", () => core.readNamespace({ name: "default" })],
    ["src/kube ResourceClient", () => namespaces.get({ name: "default" })],
  ];
  const rows: string[][] = [["client", "requests", "new connections", "ms total", "ms/request"]];
  for (const [name, get] of candidates) {
    await get(); // warm up: first connection, discovery-free
    const before = ownConnections();
    const started = performance.now();
    for (let i = 0; i < requests; i++) await get();
    const ms = performance.now() - started;
    rows.push([name, String(requests), String(ownConnections() - before), ms.toFixed(0), (ms / requests).toFixed(2)]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const row of rows) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join("  "));
} finally {
  await plane.stop();
}
