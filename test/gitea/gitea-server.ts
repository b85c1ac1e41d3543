/**
 * A real Gitea (1.27.3, built by scripts/setup.d/60-gitea.sh) for tests and the Gitea demo: its own
 * work directory and SQLite database, an admin user with an access token, Actions on, and the
 * timeouts a test needs short (a dead runner's task fails after ZOMBIE_TASK_TIMEOUT; its cron runs
 * every 10 s). Started on an address the VMs can reach (ROOT_URL is what runners and workflows are
 * told), stopped and removed by `stop()`; `restart()` keeps its data.
 */
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { existsSync, openSync, closeSync, readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";
import { freePort } from "../../src/devcluster/index.ts";
import { waitFor } from "../../src/shared/index.ts";

const exec = promisify(execFile);
const cacheDir = process.env["IMP_CACHE"] ?? resolve(import.meta.dirname, "../../.cache");
export const GITEA_BIN = join(cacheDir, "bin/gitea");
export const GITEA_RUNNER_BIN = join(cacheDir, "bin/gitea-runner");
const SOURCE_DIR_FILE = join(cacheDir, "bin/gitea-source-dir");

/** Why Gitea cannot run here (its binaries were not built), or undefined. */
export function giteaUnavailable(): string | undefined {
  for (const [what, path] of [["gitea", GITEA_BIN], ["gitea-runner", GITEA_RUNNER_BIN], ["gitea's source dir", SOURCE_DIR_FILE]] as const) {
    if (!existsSync(path)) return `${what} is missing at ${path}: npm run setup builds it (scripts/setup.d/60-gitea.sh)`;
  }
  return undefined;
}

export interface GiteaJobView {
  readonly id: number;
  readonly run_id: number;
  /** 1, and one more for each re-run. */
  readonly run_attempt?: number;
  readonly name: string;
  readonly status: string;
  readonly conclusion?: string;
  readonly runner_name?: string;
  readonly runner_id?: number;
  readonly labels: string[];
  /** The commit the job's run was started for. */
  readonly head_sha?: string;
  readonly created_at?: string;
  readonly started_at?: string;
  readonly completed_at?: string;
}

export class GiteaServer {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly dir: string;
  readonly admin = "imp-admin";
  readonly password: string;
  /** The admin's access token (all scopes). */
  token = "";
  #child: ChildProcess | undefined;
  readonly #logPath: string;

  private constructor(host: string, port: number, dir: string) {
    this.host = host;
    this.port = port;
    this.url = `http://${host}:${port}`;
    this.dir = dir;
    this.password = `P${randomBytes(12).toString("hex")}!`;
    this.#logPath = join(dir, "gitea.log");
  }

  /** Migrates a fresh database, creates the admin and its token, and starts `gitea web` on host:port. */
  static async start(options: { host?: string } = {}): Promise<GiteaServer> {
    const why = giteaUnavailable();
    if (why !== undefined) throw new Error(why);
    const host = options.host ?? "127.0.0.1";
    const dir = await mkdtemp(join(tmpdir(), "imp-gitea-"));
    const server = new GiteaServer(host, await freePort(), dir);
    try {
      await server.#writeConfig();
      await server.#cli(["migrate"]);
      const { stdout } = await server.#cli(["admin", "user", "create", "--admin", "--username", server.admin, "--password", server.password, "--email", "imp-admin@example.invalid", "--must-change-password=false", "--access-token", "--access-token-name", "imp-tests", "--access-token-scopes", "all"]);
      const token = /Access token was successfully created[^\n]*?([0-9a-f]{40})/.exec(stdout)?.[1];
      if (token === undefined) throw new Error(`gitea admin user create printed no access token: ${stdout.slice(0, 500)}`);
      server.token = token;
      await server.#web();
      return server;
    } catch (err) {
      await server.stop();
      throw err;
    }
  }

  /** Stops `gitea web` (SIGTERM, then SIGKILL) and starts it again on the same port and data. */
  async restart(): Promise<void> {
    await this.#kill();
    await this.#web();
  }

  /** Kills `gitea web` without a chance to clean up (a crash). */
  async crash(): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    this.#child = undefined;
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
  }

  async startAgain(): Promise<void> {
    await this.#web();
  }

  async stop(): Promise<void> {
    await this.#kill();
    await rm(this.dir, { recursive: true, force: true });
  }

  log(): string {
    try {
      return readFileSync(this.#logPath, "utf8");
    } catch {
      return "";
    }
  }

  /** A call of Gitea's REST API as the admin; throws on an unexpected status. */
  async api<T = unknown>(method: string, path: string, body?: unknown, expect: readonly number[] = [200, 201, 204]): Promise<T> {
    const r = await fetch(`${this.url}/api/v1${path}`, {
      method,
      headers: { authorization: `token ${this.token}`, accept: "application/json", ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    if (!expect.includes(r.status)) throw new Error(`gitea ${method} ${path}: HTTP ${r.status} ${text.slice(0, 500)}`);
    return (text === "" ? undefined : r.headers.get("content-type")?.includes("json") === true ? JSON.parse(text) : text) as T;
  }

  async createOrg(name: string): Promise<void> {
    await this.api("POST", "/orgs", { username: name, visibility: "public" });
  }

  async createRepo(owner: string, name: string): Promise<void> {
    await this.api("POST", `/orgs/${owner}/repos`, { name, auto_init: true, default_branch: "main", private: false });
  }

  /** Commits a file on main (a workflow under .gitea/workflows starts a run); returns the commit's sha (the run's jobs carry it as head_sha). */
  async putFile(owner: string, repo: string, path: string, content: string, message = `add ${path}`): Promise<string> {
    const r = await this.api<{ commit?: { sha?: string } }>("POST", `/repos/${owner}/${repo}/contents/${path}`, { content: Buffer.from(content).toString("base64"), message, branch: "main" });
    return r.commit?.sha ?? "";
  }

  async jobs(owner: string, repo: string, status?: string): Promise<GiteaJobView[]> {
    const qs = new URLSearchParams({ limit: "50", ...(status === undefined ? {} : { status }) });
    return (await this.api<{ jobs: GiteaJobView[] }>("GET", `/repos/${owner}/${repo}/actions/jobs?${qs}`)).jobs;
  }

  async job(owner: string, repo: string, id: number): Promise<GiteaJobView> {
    return this.api<GiteaJobView>("GET", `/repos/${owner}/${repo}/actions/jobs/${id}`);
  }

  /** A job's log as Gitea serves it (lines prefixed by a timestamp). */
  async jobLog(owner: string, repo: string, id: number): Promise<string> {
    const r = await fetch(`${this.url}/api/v1/repos/${owner}/${repo}/actions/jobs/${id}/logs`, { headers: { authorization: `token ${this.token}` } });
    return r.ok ? r.text() : "";
  }

  async runners(scope: string): Promise<Array<{ id: number; name: string; status: string; busy: boolean }>> {
    return (await this.api<{ runners: Array<{ id: number; name: string; status: string; busy: boolean }> }>("GET", `${scope}/actions/runners?limit=50`)).runners;
  }

  async #writeConfig(): Promise<void> {
    const source = readFileSync(SOURCE_DIR_FILE, "utf8").trim();
    const data = join(this.dir, "data");
    const ini = `WORK_PATH = ${this.dir}
RUN_MODE = prod
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
HTTP_ADDR = ${this.host}
HTTP_PORT = ${this.port}
ROOT_URL = ${this.url}/
STATIC_ROOT_PATH = ${source}
APP_DATA_PATH = ${data}
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = ${data}/gitea.db

[security]
INSTALL_LOCK = true
SECRET_KEY = ${randomBytes(24).toString("hex")}
INTERNAL_TOKEN = ${randomBytes(48).toString("base64url")}
ALLOWED_HOST_LIST = loopback,private

[oauth2]
JWT_SECRET = ${randomBytes(32).toString("base64url")}

[actions]
ENABLED = true
DEFAULT_ACTIONS_URL = self
ZOMBIE_TASK_TIMEOUT = 60s

[cron.stop_zombie_tasks]
SCHEDULE = @every 10s

[cron.update_checker]
ENABLED = false

[repository]
DEFAULT_BRANCH = main

[log]
MODE = console
LEVEL = Warn
`;
    await writeFile(join(this.dir, "app.ini"), ini, { mode: 0o600 });
  }

  #env(): NodeJS.ProcessEnv {
    return { ...process.env, GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT: "true", GITEA_WORK_DIR: this.dir, HOME: this.dir };
  }

  async #cli(args: string[]): Promise<{ stdout: string }> {
    return exec(GITEA_BIN, ["-c", join(this.dir, "app.ini"), ...args], { env: this.#env(), timeout: 180_000, maxBuffer: 8 << 20 });
  }

  async #web(): Promise<void> {
    const out = openSync(this.#logPath, "a");
    const child = spawn(GITEA_BIN, ["-c", join(this.dir, "app.ini"), "web"], { env: this.#env(), stdio: ["ignore", out, out] });
    closeSync(out);
    this.#child = child;
    await waitFor("gitea answering", async () => {
      if (child.exitCode !== null) throw new Error(`gitea web exited with ${child.exitCode}: ${this.log().slice(-2000)}`);
      const r = await fetch(`${this.url}/api/v1/version`).catch(() => undefined);
      return r?.ok === true ? true : undefined;
    }, { timeoutMs: 120_000, intervalMs: 200 });
  }

  async #kill(): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    this.#child = undefined;
    if (child.exitCode !== null) return;
    child.kill("SIGTERM");
    const exited = new Promise((r) => child.once("exit", r));
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}
