/**
 * Registry credentials from a `kubernetes.io/dockerconfigjson` Secret. The caller passes the Secret's
 * `data` (base64 values, as the API returns them) or the decoded JSON; no Kubernetes call happens here.
 * Credentials are kept in memory only and never logged.
 */
import { terminalError } from "../../../shared/index.ts";
import type { CredentialLookup, RegistryCredentials } from "./types.ts";

const MAX_CONFIG_BYTES = 1024 * 1024;

/** Reads the `.dockerconfigjson` key of a Secret's base64 `data`. */
export function credentialsFromSecretData(data: Readonly<Record<string, string>>): CredentialLookup {
  const encoded = data[".dockerconfigjson"];
  if (encoded === undefined) {
    throw terminalError("InvalidPullSecret", "Cannot read registry credentials: the Secret has no .dockerconfigjson key (type kubernetes.io/dockerconfigjson expected)");
  }
  if (encoded.length > (MAX_CONFIG_BYTES * 4) / 3 + 4) throw terminalError("InvalidPullSecret", "Cannot read registry credentials: .dockerconfigjson is larger than 1 MiB");
  return credentialsFromDockerConfig(Buffer.from(encoded, "base64").toString("utf8"));
}

/** Parses a Docker config JSON (`{"auths": {"host": {"auth": base64(user:pass)} | {"username","password"}}}`). */
export function credentialsFromDockerConfig(json: string): CredentialLookup {
  const bad = (why: string): Error => terminalError("InvalidPullSecret", `Cannot read registry credentials: ${why}`);
  if (json.length > MAX_CONFIG_BYTES) throw bad("the config is larger than 1 MiB");
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch {
    throw bad(".dockerconfigjson is not JSON");
  }
  const auths = (doc as { auths?: unknown } | null)?.auths;
  if (typeof auths !== "object" || auths === null) throw bad(".dockerconfigjson has no auths object");
  const table = new Map<string, RegistryCredentials>();
  for (const [key, entry] of Object.entries(auths as Record<string, unknown>)) {
    const creds = entryCredentials(entry);
    if (creds !== undefined) table.set(normaliseRegistryKey(key), creds);
  }
  return (host) => table.get(host.toLowerCase());
}

function entryCredentials(entry: unknown): RegistryCredentials | undefined {
  if (typeof entry !== "object" || entry === null) return undefined;
  const e = entry as { auth?: unknown; username?: unknown; password?: unknown };
  if (typeof e.username === "string" && typeof e.password === "string" && e.username !== "") {
    return { username: e.username, password: e.password };
  }
  if (typeof e.auth === "string" && e.auth !== "") {
    const decoded = Buffer.from(e.auth, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon > 0) return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  return undefined;
}

/** `https://host:port/v1/` and `host:port` name the same registry; keys are compared as `host[:port]`. */
export function normaliseRegistryKey(key: string): string {
  let k = key.trim().toLowerCase().replace(/^[a-z]+:\/\//, "");
  const slash = k.indexOf("/");
  if (slash >= 0) k = k.slice(0, slash);
  return k;
}

/** Combines lookups: the first that knows the host wins. */
export const firstCredentials = (...lookups: readonly CredentialLookup[]): CredentialLookup => (host) => {
  for (const lookup of lookups) {
    const found = lookup(host);
    if (found !== undefined) return found;
  }
  return undefined;
};
