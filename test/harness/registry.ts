/**
 * A real OCI registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) on a free loopback
 * port, anonymous, with htpasswd basic auth, or with token auth trusting `startTokenServer` (a small
 * token server issuing RS256 JWTs per the Docker token spec, signed with a throwaway certificate).
 * Several registries can serve one storage directory, so an image pushed once anonymously is then
 * pulled through each auth mode. `startFaultProxy` sits in front of a registry to inject 503s,
 * redirects, slow or stalled bodies, and to measure concurrency. Everything listens on 127.0.0.1 only.
 */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createSign, randomBytes, randomUUID, X509Certificate } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../src/devcluster/index.ts";
import type { Blob, TestImage, TestIndex } from "./oci-image.ts";

export type RegistryAuthConfig =
  | { readonly kind: "htpasswd"; readonly users: Readonly<Record<string, string>> }
  | { readonly kind: "token"; readonly tokenServer: TokenServer };

export interface RunningRegistry {
  /** `127.0.0.1:PORT`, the registry part of image references. */
  readonly host: string;
  readonly url: string;
  readonly rootDir: string;
  stop(): Promise<void>;
}

const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

export { freePort };

/** Starts docker-registry; `rootDir` shares storage with another registry (it is then not deleted on stop). */
export async function startRegistry(options: { rootDir?: string; auth?: RegistryAuthConfig } = {}): Promise<RunningRegistry> {
  const work = await mkdtemp(join(tmpdir(), "imp-registry-"));
  const rootDir = options.rootDir ?? join(work, "storage");
  const port = await freePort();
  const lines = [
    "version: 0.1",
    "log:",
    "  level: error",
    "  accesslog:",
    "    disabled: true",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${rootDir}`,
    "  delete:",
    "    enabled: true",
    "  maintenance:",
    "    uploadpurging:",
    "      enabled: false",
    "http:",
    `  addr: 127.0.0.1:${port}`,
    `  secret: ${randomBytes(16).toString("hex")}`,
  ];
  if (options.auth?.kind === "htpasswd") {
    const file = join(work, "htpasswd");
    const entries = Object.entries(options.auth.users).map(([user, pass]) =>
      execFileSync("htpasswd", ["-Bbn", user, pass], { encoding: "utf8" }).trim());
    await writeFile(file, `${entries.join("\n")}\n`);
    lines.push("auth:", "  htpasswd:", "    realm: imp-test", `    path: ${file}`);
  } else if (options.auth?.kind === "token") {
    const t = options.auth.tokenServer;
    lines.push("auth:", "  token:", `    realm: ${t.realm}`, `    service: ${t.service}`, `    issuer: ${t.issuer}`, `    rootcertbundle: ${t.certPath}`);
  }
  const configPath = join(work, "config.yml");
  await writeFile(configPath, `${lines.join("\n")}\n`);
  // setpriv --pdeathsig: the registry dies with the test process even when that is SIGKILLed.
  const child = spawn("setpriv", ["--pdeathsig", "SIGKILL", "--", "docker-registry", "serve", configPath], { stdio: ["ignore", "ignore", "pipe"] });
  children.add(child);
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => { stderr = (stderr + d.toString()).slice(-4000); });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`docker-registry exited with ${child.exitCode}: ${stderr}`);
    const status = await fetch(`${url}/v2/`).then((r) => r.status, () => 0);
    if (status === 200 || status === 401) break;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`docker-registry did not answer on ${url} within 20 s: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    host: `127.0.0.1:${port}`,
    url,
    rootDir,
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        if (child.exitCode === null) child.kill("SIGKILL");
      }
      children.delete(child);
      await rm(work, { recursive: true, force: true });
    },
  };
}

/** Pushes blobs and manifests with the distribution API (monolithic uploads). Returns the top digest. */
export async function pushImage(registryUrl: string, repository: string, tag: string, target: TestImage | TestIndex): Promise<string> {
  const images = "index" in target ? target.images : [target];
  for (const image of images) {
    for (const blob of [image.config, ...image.layers]) await pushBlob(registryUrl, repository, blob);
    if ("index" in target) await putManifest(registryUrl, repository, image.manifest.digest, image.manifest);
  }
  const top = "index" in target ? target.index : target.manifest;
  await putManifest(registryUrl, repository, tag, top);
  return top.digest;
}

async function pushBlob(registryUrl: string, repository: string, blob: Blob): Promise<void> {
  const head = await fetch(`${registryUrl}/v2/${repository}/blobs/${blob.digest}`, { method: "HEAD" });
  if (head.ok) return;
  const start = await fetch(`${registryUrl}/v2/${repository}/blobs/uploads/`, { method: "POST" });
  if (start.status !== 202) throw new Error(`upload start for ${blob.digest}: ${start.status} ${await start.text()}`);
  const location = new URL(start.headers.get("location") ?? "", registryUrl);
  location.searchParams.set("digest", blob.digest);
  const put = await fetch(location, { method: "PUT", headers: { "content-type": "application/octet-stream" }, body: blob.bytes });
  if (put.status !== 201) throw new Error(`upload of ${blob.digest}: ${put.status} ${await put.text()}`);
}

async function putManifest(registryUrl: string, repository: string, reference: string, manifest: Blob): Promise<void> {
  const res = await fetch(`${registryUrl}/v2/${repository}/manifests/${reference}`, {
    method: "PUT",
    headers: { "content-type": manifest.mediaType },
    body: manifest.bytes,
  });
  if (res.status !== 201) throw new Error(`manifest put ${repository}:${reference}: ${res.status} ${await res.text()}`);
}

/** Path of a blob's data in a registry's filesystem storage (to corrupt it in tests). */
export const registryBlobPath = (rootDir: string, digest: string): string => {
  const hex = digest.slice("sha256:".length);
  return join(rootDir, "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data");
};

/** Rewrites a stored blob with the same length but different bytes: the registry serves it as is. */
export async function corruptRegistryBlob(rootDir: string, digest: string): Promise<void> {
  const path = registryBlobPath(rootDir, digest);
  const bytes = await readFile(path);
  for (let i = 0; i < bytes.length; i += 97) bytes[i] = (bytes[i] as number) ^ 0xff;
  await writeFile(path, bytes);
}

export interface TokenServer {
  readonly realm: string;
  readonly service: string;
  readonly issuer: string;
  readonly certPath: string;
  /** Token requests received, with the scope asked and whether Basic credentials were valid. */
  readonly requests: { scope: string | null; user: string | undefined }[];
  stop(): Promise<void>;
}

/**
 * A token server per the Docker token authentication spec: GET ?service=&scope=repository:NAME:ACTIONS,
 * optional Basic credentials; answers {token, access_token, expires_in, issued_at}. The JWT is RS256
 * with the signing certificate in `x5c`, which docker-registry verifies against `rootcertbundle`.
 */
export async function startTokenServer(options: { users: Readonly<Record<string, string>>; allowAnonymous?: boolean; expiresIn?: number }): Promise<TokenServer> {
  const work = await mkdtemp(join(tmpdir(), "imp-token-"));
  const keyPath = join(work, "key.pem");
  const certPath = join(work, "cert.pem");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", keyPath, "-out", certPath, "-days", "2", "-subj", "/CN=imp-test-token-issuer"], { stdio: "ignore" });
  const key = await readFile(keyPath, "utf8");
  const certDer = new X509Certificate(await readFile(certPath)).raw.toString("base64");
  const service = "imp-test-registry";
  const issuer = "imp-test-issuer";
  const requests: TokenServer["requests"] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    const scope = url.searchParams.get("scope");
    const user = basicUser(req.headers.authorization, options.users);
    requests.push({ scope, user });
    if (user === undefined && (req.headers.authorization !== undefined || options.allowAnonymous !== true)) {
      res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ details: "bad credentials" }));
      return;
    }
    const access = scope === null ? [] : scope.split(" ").map((s) => {
      const [type, ...rest] = s.split(":");
      const actions = (rest.pop() ?? "").split(",").filter((a) => a === "pull" || (a === "push" && user !== undefined));
      return { type, name: rest.join(":"), actions };
    });
    const now = Math.floor(Date.now() / 1000);
    const expiresIn = options.expiresIn ?? 300;
    const claims = { iss: issuer, sub: user ?? "", aud: url.searchParams.get("service") ?? service, exp: now + expiresIn, nbf: now - 10, iat: now, jti: randomUUID(), access };
    const token = signJwt({ alg: "RS256", typ: "JWT", x5c: [certDer] }, claims, key);
    res.writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ token, access_token: token, expires_in: expiresIn, issued_at: new Date(now * 1000).toISOString() }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    realm: `http://127.0.0.1:${port}/token`,
    service,
    issuer,
    certPath,
    requests,
    stop: async () => {
      await closeServer(server);
      await rm(work, { recursive: true, force: true });
    },
  };
}

function basicUser(header: string | undefined, users: Readonly<Record<string, string>>): string | undefined {
  if (header?.startsWith("Basic ") !== true) return undefined;
  const decoded = Buffer.from(header.slice(6), "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  const user = decoded.slice(0, colon);
  return colon > 0 && users[user] === decoded.slice(colon + 1) ? user : undefined;
}

const b64url = (v: Buffer | string): string => Buffer.from(v).toString("base64url");

function signJwt(header: object, claims: object, keyPem: string): string {
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  return `${input}.${createSign("RSA-SHA256").update(input).sign(keyPem).toString("base64url")}`;
}

/** What the fault proxy does with one request; undefined forwards it unchanged. */
export type FaultAction =
  | { readonly kind: "respond"; readonly status: number; readonly headers?: Record<string, string>; readonly body?: string }
  | { readonly kind: "redirect"; readonly location: string; readonly status?: number }
  /** Forward, but send only the first `bytes` of the body and then hang until the proxy stops. */
  | { readonly kind: "stall-after"; readonly bytes: number }
  /** Forward after `ms`. */
  | { readonly kind: "delay"; readonly ms: number }
  /** Forward without the Range header (a server that ignores ranges). */
  | { readonly kind: "strip-range" };

export interface FaultProxy {
  readonly host: string;
  readonly url: string;
  /** Blob GETs in flight right now, and the most seen at once. */
  readonly stats: { inFlightBlobs: number; maxInFlightBlobs: number; blobGets: number; requests: string[]; ranges: (string | undefined)[] };
  stop(): Promise<void>;
}

/**
 * An HTTP proxy to `targetUrl` whose `decide(req, n)` hook (n = how many requests with this method and
 * path came before) can inject faults. Extra `routes` are served by the proxy itself (e.g. a fake
 * "storage" host that blobs redirect to).
 */
export async function startFaultProxy(
  targetUrl: string,
  decide: (req: IncomingMessage, seen: number) => FaultAction | undefined,
  routes: (req: IncomingMessage, res: ServerResponse) => boolean = () => false,
): Promise<FaultProxy> {
  const target = new URL(targetUrl);
  const seen = new Map<string, number>();
  const stats = { inFlightBlobs: 0, maxInFlightBlobs: 0, blobGets: 0, requests: [] as string[], ranges: [] as (string | undefined)[] };
  const hanging = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    if (routes(req, res)) return;
    const key = `${req.method} ${req.url}`;
    stats.requests.push(key);
    const n = seen.get(key) ?? 0;
    seen.set(key, n + 1);
    const isBlob = req.method === "GET" && /\/blobs\/sha256:/.test(req.url ?? "");
    if (isBlob) {
      stats.ranges.push(req.headers.range);
      stats.blobGets++;
      stats.inFlightBlobs++;
      stats.maxInFlightBlobs = Math.max(stats.maxInFlightBlobs, stats.inFlightBlobs);
      res.on("close", () => { stats.inFlightBlobs--; });
    }
    const action = decide(req, n);
    if (action?.kind === "respond") {
      res.writeHead(action.status, action.headers ?? {}).end(action.body ?? "");
      return;
    }
    if (action?.kind === "redirect") {
      res.writeHead(action.status ?? 307, { location: action.location }).end();
      return;
    }
    const forward = (): void => {
      const upstream = httpRequest(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: forwardHeaders(req, target.host, action?.kind === "strip-range") },
        (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          if (action?.kind !== "stall-after") {
            up.pipe(res);
            return;
          }
          let sent = 0;
          hanging.add(res);
          up.on("data", (chunk: Buffer) => {
            if (sent >= action.bytes) return;
            const part = chunk.subarray(0, action.bytes - sent);
            sent += part.length;
            res.write(part);
            if (sent >= action.bytes) up.destroy();
          });
        },
      );
      upstream.on("error", () => res.destroy());
      req.pipe(upstream);
    };
    if (action?.kind === "delay") setTimeout(forward, action.ms);
    else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    host: `127.0.0.1:${port}`,
    url: `http://127.0.0.1:${port}`,
    stats,
    stop: async () => {
      for (const res of hanging) res.destroy();
      await closeServer(server);
    },
  };
}

function forwardHeaders(req: IncomingMessage, host: string, stripRange: boolean): Record<string, string | string[] | undefined> {
  const headers: Record<string, string | string[] | undefined> = { ...req.headers, host };
  if (stripRange) delete headers.range;
  return headers;
}

async function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
