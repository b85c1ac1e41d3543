import { readFile } from "node:fs/promises";
import { stringify } from "yaml";
import type { Pki } from "./pki.ts";

/** A kubeconfig with the credentials embedded, so it stays valid wherever it is copied; kubectl and client-node both read it. */
export async function renderKubeconfig(server: string, pki: Pki, user = "imp-admin"): Promise<string> {
  const b64 = async (path: string): Promise<string> => (await readFile(path)).toString("base64");
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "imp-dev", cluster: { server, "certificate-authority-data": await b64(pki.caCert) } }],
    users: [{ name: user, user: { "client-certificate-data": await b64(pki.adminCert), "client-key-data": await b64(pki.adminKey) } }],
    contexts: [{ name: "imp-dev", context: { cluster: "imp-dev", user } }],
    "current-context": "imp-dev",
    preferences: {},
  });
}
