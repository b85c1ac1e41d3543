/**
 * The GitHub Actions service's runner scale-set API, as the GitHub test server stands in for it:
 * what `github.com/actions/scaleset` (the Go module actions-runner-controller's listener uses) sends
 * and parses, shape for shape (actions-service.contract.test.ts pins them). GitHub serves it on
 * another host; here it lives under `/_services/actions/tenant/1/` (the URL `POST
 * /actions/runner-registration` hands out) and the message queues under `/_services/queue/`.
 *
 * Semantics the tests depend on, as GitHub has them:
 *  - one message session per scale set: a second is refused with 409 until the first is deleted or
 *    goes stale (no poll for `sessionIdleMs`, as a crashed listener's session does);
 *  - the queue long-polls (`queuePollMs`) and answers 200 with the oldest message not deleted whose
 *    id is past `lastMessageId`, or 202; a message is redelivered until it is deleted (the ack);
 *    401 once the session's queue token expired (a PATCH of the session gives a new one);
 *  - jobs whose labels the scale set carries reach it as JobAvailable; `acquirejobs` (session
 *    token) assigns them (the first scale set to acquire wins); only that scale set's runners can
 *    take them (JobStarted), and their end is JobCompleted; an assigned job no runner took within
 *    `reassignAfterMs` is cancelled for the scale set and offered again (JobCompleted canceled, then
 *    JobAvailable), at most 3 times, as GitHub re-queues it;
 *  - every message carries the scale set's statistics; totalAssignedJobs counts jobs assigned and
 *    not completed;
 *  - the poll's `X-ScaleSetMaxCapacity` is how many jobs the scale set can hold at once
 *    (actions/scaleset: "allows the backend to assign jobs accurately and avoid creating backlogs
 *    your scale set cannot fulfill"): a job is offered only while the scale set's assigned jobs plus
 *    its offers not yet acquired stay below the last capacity it sent; the rest wait, counted in
 *    totalAvailableJobs, and are offered (oldest first) as the capacity a poll sends grows or its
 *    jobs complete. An offer not acquired within `reofferAfterMs` no longer holds a place and is
 *    made again. GitHub does not document its algorithm; this is the contract's plain reading.
 *    Before a scale set's first poll no capacity is known and nothing is offered: the first poll
 *    offers what waits, as far as its capacity allows. Every capacity a poll said is kept, in
 *    order (`capacities`), so a test can assert on all of them, not on samples.
 */
import { randomBytes, randomUUID } from "node:crypto";

export const ACTIONS_SERVICE_PATH = "/_services/actions/tenant/1";
export const QUEUE_PATH = "/_services/queue";
const NIL_UUID = "00000000-0000-0000-0000-000000000000";

export interface ScaleSetLabel {
  readonly type: string;
  readonly name: string;
}

export interface TestScaleSet {
  readonly id: number;
  readonly name: string;
  readonly scopeKey: string;
  readonly runnerGroupId: number;
  readonly runnerGroupName: string;
  readonly labels: readonly ScaleSetLabel[];
  readonly createdOn: string;
  /** Messages not deleted yet, oldest first. */
  readonly messages: QueuedMessage[];
  session: TestSession | undefined;
  /** The X-ScaleSetMaxCapacity of its last poll; undefined before the first. */
  maxCapacity?: number | undefined;
  /** Job id → when it was last offered to this scale set (JobAvailable sent). */
  readonly offers: Map<number, number>;
  /** Every X-ScaleSetMaxCapacity its polls said, oldest first. */
  readonly capacities: number[];
}

export interface TestSession {
  readonly id: string;
  readonly ownerName: string;
  readonly scaleSetId: number;
  queueToken: string;
  queueTokenExpiresAt: number;
  /** Date.now() of the last poll (or of creation). */
  seenAt: number;
}

interface QueuedMessage {
  readonly id: number;
  /** JSON of the job messages array (the envelope's `body` is this string). */
  readonly body: string;
  readonly statistics: Statistics;
}

export interface Statistics {
  totalAvailableJobs: number;
  totalAcquiredJobs: number;
  totalAssignedJobs: number;
  totalRunningJobs: number;
  totalRegisteredRunners: number;
  totalBusyRunners: number;
  totalIdleRunners: number;
}

/** What the service needs of the rest of the test server. */
export interface ActionsServiceHost {
  readonly url: string;
  jobs(): Iterable<ScaleSetJob>;
  runnersOf(scaleSetId: number): Iterable<{ readonly id: number; readonly name: string; readonly busy: boolean; readonly status: string }>;
  registerScaleSetRunner(scaleSet: TestScaleSet, name: string, workFolder: string): { id: number; name: string; encoded: string };
  findRunner(id: number): { readonly id: number; readonly name: string; readonly busy: boolean; readonly scaleSetId?: number } | undefined;
  removeRunner(id: number): void;
  scopeKeyOfRegistration(token: string): string | undefined;
}

/** The job fields the service reads and writes (the server's TestJob has them). */
export interface ScaleSetJob {
  readonly id: number;
  readonly runId: number;
  readonly name: string;
  readonly repo: { readonly owner: string; readonly repo: string };
  readonly labels: readonly string[];
  readonly queuedAt: number;
  status: "queued" | "in_progress" | "completed";
  runnerName: string | undefined;
  runnerId: number | undefined;
  conclusion: "success" | "failure" | "cancelled" | undefined;
  /** The scale set that acquired it, and when; undefined while available. */
  scaleSetId?: number | undefined;
  acquiredAt?: number | undefined;
  /** How often it was offered again after no runner took it. */
  reoffers?: number;
}

export interface ActionsServiceOptions {
  readonly queuePollMs: number;
  readonly sessionIdleMs: number;
  readonly queueTokenTtlMs: number;
  readonly adminTokenTtlSeconds: number;
  readonly reassignAfterMs: number;
  /** An offer (JobAvailable) not acquired within this holds no place under the capacity any more; default reassignAfterMs. */
  readonly reofferAfterMs?: number;
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class ActionsService {
  readonly scaleSets = new Map<number, TestScaleSet>();
  readonly adminTokens = new Map<string, { expiresAtMs: number; scopeKey: string }>();
  readonly #host: ActionsServiceHost;
  readonly #o: ActionsServiceOptions;
  #nextId = 1;
  #nextMessageId = 1;
  /** Sessions dropped server-side: their queue answers 401. */
  readonly #dropped = new Set<string>();
  readonly #pinned = new Set<number>();
  /** Faults: 5xx on every Actions-service request until then (Date.now()). */
  failUntil = 0;

  constructor(host: ActionsServiceHost, options: ActionsServiceOptions) {
    this.#host = host;
    this.#o = options;
  }

  // ---- control ---------------------------------------------------------------------------------

  /** Expires every queue token: the next poll, ack or acquire gets 401. */
  expireQueueTokens(): void {
    for (const s of this.scaleSets.values()) if (s.session !== undefined) s.session.queueTokenExpiresAt = 0;
  }

  /**
   * Deletes a session server-side, as GitHub drops one: its queue token stops working (the next poll
   * is 401, as for an expired token) and the refresh that follows answers 404.
   */
  dropSession(scaleSetId: number): void {
    const s = this.scaleSets.get(scaleSetId);
    if (s?.session !== undefined) this.#dropped.add(s.session.id);
    if (s !== undefined) s.session = undefined;
  }

  /**
   * Keeps a scale set's session from going stale while pinned — a dead listener's session that
   * GitHub has not expired yet, however slowly the test's next step comes — and lets it expire on
   * the next tick once unpinned (its last poll is long past).
   */
  pinSession(scaleSetId: number, pinned: boolean): void {
    if (pinned) this.#pinned.add(scaleSetId);
    else this.#pinned.delete(scaleSetId);
  }

  /** Deletes a scale set server-side, as an admin in the GitHub UI. */
  deleteScaleSet(id: number): void {
    this.scaleSets.delete(id);
  }

  /** Sends the scale set a JobAvailable for `jobId` once more, as a duplicate delivery of a message already handled. */
  redeliver(scaleSetId: number, jobId: number): void {
    const s = this.scaleSets.get(scaleSetId);
    const job = [...this.#host.jobs()].find((j) => j.id === jobId);
    if (s === undefined || job === undefined) throw new Error(`no scale set ${scaleSetId} or job ${jobId}`);
    this.#send(s, [this.#jobMessage("JobAvailable", job, { acquireJobUrl: `${this.#base()}/_apis/runtime/runnerrequests/${job.id}` })]);
  }

  scaleSetNamed(name: string): TestScaleSet | undefined {
    return [...this.scaleSets.values()].find((s) => s.name === name);
  }

  // ---- events from the rest of the server ------------------------------------------------------

  /** A job was queued: every scale set in its scope that carries its labels is offered it, as far as its capacity allows. */
  jobQueued(job: ScaleSetJob): void {
    for (const s of this.scaleSets.values()) if (this.#takes(s, job) && this.#room(s, Date.now()) > 0) this.#offer(s, job);
  }

  /** Jobs assigned to `s` and not completed. */
  assignedTo(s: TestScaleSet): number {
    return [...this.#host.jobs()].filter((j) => j.scaleSetId === s.id && j.status !== "completed").length;
  }

  #offer(s: TestScaleSet, job: ScaleSetJob): void {
    s.offers.set(job.id, Date.now());
    this.#send(s, [this.#jobMessage("JobAvailable", job, { acquireJobUrl: `${this.#base()}/_apis/runtime/runnerrequests/${job.id}` })]);
  }

  /** Offers `s` may still make under its capacity: not its assigned jobs, nor its offers still open. */
  #room(s: TestScaleSet, now: number): number {
    if (s.maxCapacity === undefined) return 0;
    return s.maxCapacity - this.assignedTo(s) - this.#openOffers(s, now).size;
  }

  /** Jobs offered to `s` within reofferAfterMs, still queued and acquired by no one. */
  #openOffers(s: TestScaleSet, now: number): Set<number> {
    const open = new Set<number>();
    const offers = s.offers;
    for (const job of this.#host.jobs()) {
      const at = offers.get(job.id);
      if (at !== undefined && job.status === "queued" && job.scaleSetId === undefined && now - at < (this.#o.reofferAfterMs ?? this.#o.reassignAfterMs)) open.add(job.id);
    }
    return open;
  }

  /** Offers what waits for `s`, oldest first, while its capacity has room. */
  #topUp(s: TestScaleSet): void {
    const now = Date.now();
    let room = this.#room(s, now);
    if (room <= 0) return;
    const open = this.#openOffers(s, now);
    const waiting = [...this.#host.jobs()].filter((j) => j.status === "queued" && j.scaleSetId === undefined && !open.has(j.id) && this.#takes(s, j)).sort((a, b) => a.queuedAt - b.queuedAt || a.id - b.id);
    for (const job of waiting) {
      if (room-- <= 0) break;
      this.#offer(s, job);
    }
  }

  /** Whether a runner of `scaleSetId` may take `job`: only what its scale set acquired. */
  runnerMayTake(scaleSetId: number | undefined, job: ScaleSetJob): boolean {
    if (scaleSetId === undefined) return job.scaleSetId === undefined && ![...this.scaleSets.values()].some((s) => this.#takes(s, job));
    return job.scaleSetId === scaleSetId;
  }

  jobStarted(job: ScaleSetJob): void {
    const s = job.scaleSetId === undefined ? undefined : this.scaleSets.get(job.scaleSetId);
    if (s !== undefined) this.#send(s, [this.#jobMessage("JobStarted", job, { runnerId: job.runnerId ?? 0, runnerName: job.runnerName ?? "" })]);
  }

  jobCompleted(job: ScaleSetJob): void {
    const s = job.scaleSetId === undefined ? undefined : this.scaleSets.get(job.scaleSetId);
    if (s === undefined) return;
    const result = job.conclusion === "success" ? "succeeded" : job.conclusion === "cancelled" ? "canceled" : "failed";
    this.#send(s, [this.#jobMessage("JobCompleted", job, { result, runnerId: job.runnerId ?? 0, runnerName: job.runnerName ?? "", finishTime: iso(Date.now()) })]);
  }

  /** Called on a timer: assigned jobs no runner took in time are offered again; stale sessions end. */
  tick(now: number): void {
    for (const s of this.scaleSets.values()) {
      if (s.session !== undefined && !this.#pinned.has(s.id) && now - s.session.seenAt > this.#o.sessionIdleMs) s.session = undefined;
    }
    for (const job of this.#host.jobs()) {
      if (job.status !== "queued" || job.scaleSetId === undefined || job.acquiredAt === undefined || now - job.acquiredAt < this.#o.reassignAfterMs) continue;
      const s = this.scaleSets.get(job.scaleSetId);
      if ((job.reoffers ?? 0) >= 3 || s === undefined) continue;
      job.reoffers = (job.reoffers ?? 0) + 1;
      job.scaleSetId = undefined;
      job.acquiredAt = undefined;
      this.#send(s, [this.#jobMessage("JobCompleted", job, { result: "canceled", runnerId: 0, runnerName: "", finishTime: iso(now) })]);
      this.jobQueued(job);
    }
  }

  // ---- HTTP ---------------------------------------------------------------------------------

  /** `POST /actions/runner-registration` (GitHub's host): a registration token for the Actions service's URL and an admin token. */
  runnerRegistration(authorization: string | undefined, body: unknown): Reply {
    const token = /^RemoteAuth (.+)$/.exec(authorization ?? "")?.[1];
    const scopeKey = token === undefined ? undefined : this.#host.scopeKeyOfRegistration(token);
    if (scopeKey === undefined) return { status: 401, body: { message: "Bad credentials" } };
    const b = body as { url?: unknown; runner_event?: unknown } | undefined;
    if (typeof b?.url !== "string" || b.runner_event !== "register") return { status: 400, body: { message: "url and runner_event=register are required" } };
    const exp = Math.floor(Date.now() / 1000) + this.#o.adminTokenTtlSeconds;
    const admin = `${b64url({ alg: "none", typ: "JWT" })}.${b64url({ exp, scope: scopeKey, jti: randomUUID() })}.`;
    this.adminTokens.set(admin, { expiresAtMs: exp * 1000, scopeKey });
    return { status: 201, body: { url: `${this.#base()}/`, token: admin, token_schema: "OAuthAccessToken" } };
  }

  async handle(method: string, path: string, query: URLSearchParams, headers: Record<string, string | string[] | undefined>, body: unknown, hungUp: AbortSignal): Promise<Reply> {
    if (Date.now() < this.failUntil) return { status: 503, body: { $id: "1", message: "The service is unavailable.", typeName: "GitHub.Services.Common.VssServiceException, GitHub.Services.Common", typeKey: "VssServiceException", errorCode: 0, eventId: 3000 } };
    if (path.startsWith(QUEUE_PATH)) return this.#queue(method, path.slice(QUEUE_PATH.length), query, headers, hungUp);
    if (query.get("api-version") !== "6.0-preview") return actionsError(400, "ArgumentException", "api-version 6.0-preview is required");
    const sub = path.slice(ACTIONS_SERVICE_PATH.length);
    const bearer = /^Bearer (.+)$/.exec(String(headers["authorization"] ?? ""))?.[1];
    let m: RegExpExecArray | null;
    // acquirejobs speaks with the session's queue token, everything else with the admin token.
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/acquirejobs$/.exec(sub)) && method === "POST") return this.#acquireJobs(Number(m[1]), bearer, body);
    const admin = bearer === undefined ? undefined : this.adminTokens.get(bearer);
    if (admin === undefined || admin.expiresAtMs <= Date.now()) return actionsError(401, "VssUnauthorizedException", "TF400813: The user is not authorized to access this resource.");
    const scopeKey = admin.scopeKey;
    if (sub === "/_apis/runtime/runnergroups/" && method === "GET") {
      const name = query.get("groupName") ?? "";
      const groups = name.toLowerCase() === "default" ? [{ id: 1, name: "Default", size: 0, isDefaultGroup: true }] : [];
      return { status: 200, body: { count: groups.length, value: groups } };
    }
    if (sub === "/_apis/runtime/runnerscalesets" && method === "GET") {
      const found = [...this.scaleSets.values()].filter((s) => s.scopeKey === scopeKey && s.name === query.get("name") && String(s.runnerGroupId) === (query.get("runnerGroupId") ?? "1"));
      return { status: 200, body: { count: found.length, value: found.map((s) => this.#scaleSetJson(s)) } };
    }
    if (sub === "/_apis/runtime/runnerscalesets" && method === "POST") return this.#createScaleSet(scopeKey, body);
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)$/.exec(sub))) {
      const s = this.#scaleSetIn(scopeKey, Number(m[1]));
      if (s === undefined) return actionsError(404, "RunnerScaleSetNotFoundException", `No runner scale set with id ${m[1]} exists.`);
      if (method === "GET") return { status: 200, body: this.#scaleSetJson(s) };
      if (method === "DELETE") {
        this.scaleSets.delete(s.id);
        return { status: 204 };
      }
    }
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/sessions$/.exec(sub)) && method === "POST") return this.#createSession(scopeKey, Number(m[1]), body);
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/sessions\/([\w-]+)$/.exec(sub))) {
      const s = this.#scaleSetIn(scopeKey, Number(m[1]));
      const session = s?.session;
      if (s === undefined || session === undefined || session.id !== m[2]) return actionsError(404, "TaskAgentSessionExpiredException", `The session ${m[2] ?? ""} has expired.`);
      if (method === "PATCH") {
        session.queueToken = randomBytes(24).toString("base64url");
        session.queueTokenExpiresAt = Date.now() + this.#o.queueTokenTtlMs;
        session.seenAt = Date.now();
        return { status: 200, body: this.#sessionJson(s, session) };
      }
      if (method === "DELETE") {
        s.session = undefined;
        return { status: 204 };
      }
    }
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/generatejitconfig$/.exec(sub)) && method === "POST") return this.#generateJit(scopeKey, Number(m[1]), body);
    if (sub === "/_apis/distributedtask/pools/0/agents" && method === "GET") {
      const name = query.get("agentName");
      const found = [...this.scaleSets.values()].filter((s) => s.scopeKey === scopeKey).flatMap((s) => [...this.#host.runnersOf(s.id)].map((r) => ({ ...r, scaleSetId: s.id }))).filter((r) => name === null || r.name === name);
      return { status: 200, body: { count: found.length, value: found.map((r) => ({ id: r.id, name: r.name, runnerScaleSetId: r.scaleSetId })) } };
    }
    if ((m = /^\/_apis\/distributedtask\/pools\/0\/agents\/(\d+)$/.exec(sub))) {
      const runner = this.#host.findRunner(Number(m[1]));
      if (runner === undefined || runner.scaleSetId === undefined || this.#scaleSetIn(scopeKey, runner.scaleSetId) === undefined) return actionsError(404, "AgentNotFoundException", `No agent with id ${m[1] ?? ""} was found.`);
      if (method === "GET") return { status: 200, body: { id: runner.id, name: runner.name, runnerScaleSetId: runner.scaleSetId } };
      if (method === "DELETE") {
        if (runner.busy) return actionsError(400, "JobStillRunningException", `The agent ${runner.name} is running a job.`);
        this.#host.removeRunner(runner.id);
        return { status: 204 };
      }
    }
    return actionsError(404, "NotFoundException", `No route for ${method} ${sub}`);
  }

  #createScaleSet(scopeKey: string, body: unknown): Reply {
    const b = body as { name?: unknown; runnerGroupId?: unknown; labels?: unknown; RunnerSetting?: unknown; createdOn?: unknown } | undefined;
    if (typeof b?.name !== "string" || b.name === "") return actionsError(400, "ArgumentException", "name is required");
    if ([...this.scaleSets.values()].some((s) => s.scopeKey === scopeKey && s.name === b.name)) return actionsError(409, "RunnerScaleSetExistsException", `A runner scale set named ${b.name} already exists.`);
    const labels = Array.isArray(b.labels) ? (b.labels as ScaleSetLabel[]).map((l) => ({ type: l.type === "" ? "System" : l.type, name: l.name })) : [{ type: "System", name: b.name }];
    const s: TestScaleSet = {
      id: this.#nextId++,
      name: b.name,
      scopeKey,
      runnerGroupId: typeof b.runnerGroupId === "number" && b.runnerGroupId > 0 ? b.runnerGroupId : 1,
      runnerGroupName: "Default",
      labels,
      createdOn: iso(Date.now()),
      messages: [],
      session: undefined,
      offers: new Map(),
      capacities: [],
    };
    this.scaleSets.set(s.id, s);
    // Jobs already waiting reach a new scale set at its first poll (#topUp), as its capacity allows.
    return { status: 200, body: this.#scaleSetJson(s) };
  }

  #createSession(scopeKey: string, id: number, body: unknown): Reply {
    const s = this.#scaleSetIn(scopeKey, id);
    if (s === undefined) return actionsError(404, "RunnerScaleSetNotFoundException", `No runner scale set with id ${id} exists.`);
    if (s.session !== undefined) return actionsError(409, "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, GitHub.Actions.Runtime.WebApi", `The actions runner scaleset ${s.name} already has an active session.`);
    const owner = (body as { ownerName?: unknown } | undefined)?.ownerName;
    s.session = { id: randomUUID(), ownerName: typeof owner === "string" ? owner : "", scaleSetId: id, queueToken: randomBytes(24).toString("base64url"), queueTokenExpiresAt: Date.now() + this.#o.queueTokenTtlMs, seenAt: Date.now() };
    return { status: 200, body: this.#sessionJson(s, s.session) };
  }

  #acquireJobs(id: number, bearer: string | undefined, body: unknown): Reply {
    const s = this.scaleSets.get(id);
    if (s === undefined) return actionsError(404, "RunnerScaleSetNotFoundException", `No runner scale set with id ${id} exists.`);
    if (s.session === undefined || s.session.queueToken !== bearer || s.session.queueTokenExpiresAt <= Date.now()) return { status: 401, body: { message: "message queue token expired" } };
    if (!Array.isArray(body) || body.some((x) => typeof x !== "number")) return actionsError(400, "ArgumentException", "a JSON array of runner request ids is required");
    const acquired: number[] = [];
    const jobs = [...this.#host.jobs()];
    for (const requestId of body as number[]) {
      const job = jobs.find((j) => j.id === requestId);
      if (job === undefined || job.status !== "queued" || job.scaleSetId !== undefined || !this.#takes(s, job)) continue;
      job.scaleSetId = s.id;
      job.acquiredAt = Date.now();
      acquired.push(requestId);
    }
    if (acquired.length > 0) this.#send(s, acquired.map((rid) => this.#jobMessage("JobAssigned", jobs.find((j) => j.id === rid) as ScaleSetJob, {})));
    return { status: 200, body: { count: acquired.length, value: acquired } };
  }

  #generateJit(scopeKey: string, id: number, body: unknown): Reply {
    const s = this.#scaleSetIn(scopeKey, id);
    if (s === undefined) return actionsError(404, "RunnerScaleSetNotFoundException", `No runner scale set with id ${id} exists.`);
    const b = body as { name?: unknown; workFolder?: unknown } | undefined;
    if (typeof b?.name !== "string" || b.name === "") return actionsError(400, "ArgumentException", "name is required");
    const name = b.name;
    if ([...this.scaleSets.values()].some((x) => [...this.#host.runnersOf(x.id)].some((r) => r.name === name))) {
      return actionsError(409, "GitHub.DistributedTask.WebApi.AgentExistsException, GitHub.DistributedTask.WebApi", `An agent named ${name} already exists in the pool.`);
    }
    const runner = this.#host.registerScaleSetRunner(s, name, typeof b.workFolder === "string" && b.workFolder !== "" ? b.workFolder : "_work");
    return { status: 200, body: { runner: { id: runner.id, name: runner.name, runnerScaleSetId: s.id }, encodedJITConfig: runner.encoded } };
  }

  async #queue(method: string, sub: string, query: URLSearchParams, headers: Record<string, string | string[] | undefined>, hungUp: AbortSignal): Promise<Reply> {
    const m = /^\/([\w-]+)(?:\/(\d+))?$/.exec(sub);
    const session = m === null ? undefined : [...this.scaleSets.values()].map((s) => s.session).find((x) => x?.id === m[1]);
    if (session === undefined && this.#dropped.has(m?.[1] ?? "")) return { status: 401, body: { message: "message queue token expired" } };
    if (session === undefined) return { status: 404, body: { message: "no such message queue" } };
    const bearer = /^Bearer (.+)$/.exec(String(headers["authorization"] ?? ""))?.[1];
    if (session.queueToken !== bearer || session.queueTokenExpiresAt <= Date.now()) return { status: 401, body: { message: "message queue token expired" } };
    const scaleSet = this.scaleSets.get(session.scaleSetId);
    if (scaleSet === undefined) return { status: 404, body: { message: "the runner scale set is gone" } };
    if (method === "DELETE" && m?.[2] !== undefined) {
      const at = scaleSet.messages.findIndex((x) => x.id === Number(m[2]));
      if (at >= 0) scaleSet.messages.splice(at, 1);
      return { status: 204 };
    }
    if (method !== "GET") return { status: 405 };
    if (!String(headers["accept"] ?? "").includes("api-version=6.0-preview")) return { status: 400, body: { message: "Accept must carry api-version=6.0-preview" } };
    const last = Number(query.get("lastMessageId") ?? "0") || 0;
    const capacity = Number(headers["x-scalesetmaxcapacity"]);
    if (Number.isInteger(capacity) && capacity >= 0) {
      scaleSet.maxCapacity = capacity;
      scaleSet.capacities.push(capacity);
    }
    const deadline = Date.now() + this.#o.queuePollMs;
    for (;;) {
      session.seenAt = Date.now();
      if (scaleSet.session !== session) return this.#dropped.has(session.id) ? { status: 401, body: { message: "message queue token expired" } } : { status: 404, body: { message: "the session is gone" } };
      // Room may have appeared since the last look: its jobs completed, or this poll said more.
      this.#topUp(scaleSet);
      const message = scaleSet.messages.find((x) => x.id > last) ?? (last === 0 ? scaleSet.messages[0] : undefined);
      if (message !== undefined) {
        return { status: 200, body: { messageId: message.id, messageType: "RunnerScaleSetJobMessages", body: message.body, statistics: this.statistics(scaleSet) } };
      }
      if (hungUp.aborted || Date.now() >= deadline) return { status: 202 };
      await sleep(50);
    }
  }

  // ---- shapes ---------------------------------------------------------------------------------

  statistics(s: TestScaleSet): Statistics {
    const jobs = [...this.#host.jobs()];
    const runners = [...this.#host.runnersOf(s.id)];
    const available = jobs.filter((j) => j.status === "queued" && j.scaleSetId === undefined && this.#takes(s, j)).length;
    const acquired = jobs.filter((j) => j.status === "queued" && j.scaleSetId === s.id).length;
    const running = jobs.filter((j) => j.status === "in_progress" && j.scaleSetId === s.id).length;
    const busy = runners.filter((r) => r.busy).length;
    return {
      totalAvailableJobs: available,
      totalAcquiredJobs: acquired,
      totalAssignedJobs: acquired + running,
      totalRunningJobs: running,
      totalRegisteredRunners: runners.length,
      totalBusyRunners: busy,
      totalIdleRunners: runners.filter((r) => !r.busy && r.status === "online").length,
    };
  }

  #scaleSetJson(s: TestScaleSet): Record<string, unknown> {
    return { id: s.id, name: s.name, runnerGroupId: s.runnerGroupId, runnerGroupName: s.runnerGroupName, labels: s.labels, RunnerSetting: { disableUpdate: true }, createdOn: s.createdOn, runnerJitConfigUrl: `${this.#base()}/_apis/runtime/runnerscalesets/${s.id}/generatejitconfig`, statistics: this.statistics(s) };
  }

  #sessionJson(s: TestScaleSet, session: TestSession): Record<string, unknown> {
    return {
      sessionId: session.id === "" ? NIL_UUID : session.id,
      ownerName: session.ownerName,
      runnerScaleSet: this.#scaleSetJson(s),
      messageQueueUrl: `${this.#host.url}${QUEUE_PATH}/${session.id}`,
      messageQueueAccessToken: session.queueToken,
      statistics: this.statistics(s),
    };
  }

  #jobMessage(type: "JobAvailable" | "JobAssigned" | "JobStarted" | "JobCompleted", job: ScaleSetJob, extra: Record<string, unknown>): Record<string, unknown> {
    return {
      messageType: type,
      runnerRequestId: job.id,
      repositoryName: job.repo.repo,
      ownerName: job.repo.owner,
      jobId: String(job.id),
      jobWorkflowRef: `${job.repo.owner}/${job.repo.repo}/.github/workflows/ci.yml@refs/heads/main`,
      jobDisplayName: job.name,
      workflowRunId: job.runId,
      eventName: "push",
      requestLabels: job.labels,
      queueTime: iso(job.queuedAt),
      scaleSetAssignTime: job.acquiredAt === undefined ? "0001-01-01T00:00:00Z" : iso(job.acquiredAt),
      runnerAssignTime: job.status === "queued" ? "0001-01-01T00:00:00Z" : iso(Date.now()),
      finishTime: "0001-01-01T00:00:00Z",
      ...extra,
    };
  }

  #send(s: TestScaleSet, jobMessages: readonly Record<string, unknown>[]): void {
    s.messages.push({ id: this.#nextMessageId++, body: JSON.stringify(jobMessages), statistics: this.statistics(s) });
  }

  #takes(s: TestScaleSet, job: ScaleSetJob): boolean {
    const inScope = s.scopeKey === `repo:${job.repo.owner}/${job.repo.repo}` || s.scopeKey === `org:${job.repo.owner}`;
    const names = new Set(s.labels.map((l) => l.name.toLowerCase()));
    return inScope && job.labels.every((l) => names.has(l.toLowerCase()));
  }

  #scaleSetIn(scopeKey: string, id: number): TestScaleSet | undefined {
    const s = this.scaleSets.get(id);
    return s?.scopeKey === scopeKey ? s : undefined;
  }

  #base(): string {
    return `${this.#host.url}${ACTIONS_SERVICE_PATH}`;
  }
}

function actionsError(status: number, typeName: string, message: string): Reply {
  return { status, body: { $id: "1", innerException: null, message, typeName, typeKey: typeName.split(",")[0]?.split(".").at(-1) ?? typeName, errorCode: 0, eventId: 3000 } };
}

function b64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

function iso(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}
