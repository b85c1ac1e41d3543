import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import addFormatsModule from "ajv-formats";

/**
 * Holds the GitHub test server to GitHub's published OpenAPI description (@octokit/openapi): every
 * request on a GitHub path is checked against its operation's path/query parameters and request
 * body, every response against the schema for its status. The test server implements only the
 * operations listed in OPERATIONS; a request for any other GitHub path is itself a violation.
 *
 * Statuses GitHub returns on any endpoint without documenting them per operation (401 bad
 * credentials, 403/429 rate limits, 404, 5xx) are checked against GitHub's "Basic Error" schema,
 * which is how GitHub documents them elsewhere in the same description.
 */
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
const require = createRequire(import.meta.url);

export type Description = "api.github.com" | "ghec";

/** The operations Imp calls, by the description that defines them (enterprise endpoints: GitHub Enterprise Cloud). */
export const OPERATIONS: ReadonlyArray<{ readonly method: string; readonly path: string; readonly from: Description }> = [
  { method: "post", path: "/app/installations/{installation_id}/access_tokens", from: "api.github.com" },
  ...(["/repos/{owner}/{repo}", "/orgs/{org}"] as const).flatMap((prefix) => [
    { method: "post", path: `${prefix}/actions/runners/generate-jitconfig`, from: "api.github.com" as const },
    { method: "get", path: `${prefix}/actions/runners`, from: "api.github.com" as const },
    { method: "get", path: `${prefix}/actions/runners/{runner_id}`, from: "api.github.com" as const },
    { method: "delete", path: `${prefix}/actions/runners/{runner_id}`, from: "api.github.com" as const },
  ]),
  { method: "get", path: "/orgs/{org}/actions/runner-groups", from: "api.github.com" },
  // Demand that does not depend on webhook delivery: queued runs and their jobs, and one job's state.
  { method: "get", path: "/repos/{owner}/{repo}/actions/runs", from: "api.github.com" },
  { method: "get", path: "/repos/{owner}/{repo}/actions/runs/{run_id}", from: "api.github.com" },
  { method: "get", path: "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs", from: "api.github.com" },
  { method: "get", path: "/repos/{owner}/{repo}/actions/jobs/{job_id}", from: "api.github.com" },
  // The runner scale-set auth chain starts with a registration token.
  ...(["/repos/{owner}/{repo}", "/orgs/{org}"] as const).map((prefix) => ({ method: "post", path: `${prefix}/actions/runners/registration-token`, from: "api.github.com" as const })),
  { method: "post", path: "/enterprises/{enterprise}/actions/runners/generate-jitconfig", from: "ghec" },
  { method: "get", path: "/enterprises/{enterprise}/actions/runners", from: "ghec" },
  { method: "get", path: "/enterprises/{enterprise}/actions/runners/{runner_id}", from: "ghec" },
  { method: "delete", path: "/enterprises/{enterprise}/actions/runners/{runner_id}", from: "ghec" },
  { method: "get", path: "/enterprises/{enterprise}/actions/runner-groups", from: "ghec" },
];

/** Statuses GitHub may return on any operation (see the file comment). */
export const GENERIC_ERROR_STATUSES = new Set([401, 403, 404, 429, 500, 502, 503, 504]);

interface Parameter {
  readonly name: string;
  readonly in: string;
  readonly required?: boolean;
  readonly schema: object;
}

export interface Operation {
  readonly method: string;
  readonly template: string;
  readonly operationId: string;
  /** x-github.enabledForGitHubApps: whether an App installation token may call it at all. */
  readonly enabledForGitHubApps: boolean;
  readonly regex: RegExp;
  readonly pathNames: readonly string[];
  readonly parameters: readonly Parameter[];
  readonly requestBody: { readonly required: boolean; readonly validate: ValidateFunction } | undefined;
  readonly responses: ReadonlyMap<number, ValidateFunction | "no-content">;
  /** The documented (dereferenced) JSON schema of each response with a body, to sample one from. */
  readonly responseSchemas: ReadonlyMap<number, object>;
}

export interface Violation {
  readonly direction: "request" | "response" | "webhook";
  readonly method: string;
  readonly path: string;
  readonly operationId: string | undefined;
  readonly problem: string;
}

interface RawOperation {
  operationId: string;
  "x-github"?: { enabledForGitHubApps?: boolean };
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content?: Record<string, { schema?: object }> };
  responses: Record<string, { content?: Record<string, { schema?: object }> }>;
}

function loadDescription(from: Description): { paths: Record<string, Record<string, RawOperation>> } {
  const file = require.resolve(`@octokit/openapi/generated/${from}.deref.json`);
  return allowNullInNullableEnums(JSON.parse(readFileSync(file, "utf8"))) as { paths: Record<string, Record<string, RawOperation>> };
}

/**
 * OpenAPI 3.0's `nullable: true` beside an `enum` that lacks null: GitHub's description writes job
 * `conclusion` so and GitHub sends null there for every job not completed. Read strictly (as ajv
 * does), null would be refused; the description means it, so null joins such enums. The
 * description is dereferenced, so one object may be reached many times; each is changed once.
 */
function allowNullInNullableEnums(node: unknown, seen = new Set<object>()): unknown {
  if (typeof node !== "object" || node === null || seen.has(node)) return node;
  seen.add(node);
  const o = node as Record<string, unknown>;
  if (o["nullable"] === true && Array.isArray(o["enum"]) && !(o["enum"] as unknown[]).includes(null)) (o["enum"] as unknown[]).push(null);
  for (const value of Object.values(o)) allowNullInNullableEnums(value, seen);
  return node;
}

function describeErrors(errors: readonly ErrorObject[] | null | undefined): string {
  return (errors ?? []).slice(0, 5).map((e) => `${e.instancePath || "(root)"} ${e.message ?? "invalid"}${e.params && Object.keys(e.params).length > 0 ? ` ${JSON.stringify(e.params)}` : ""}`).join("; ");
}

/** The workflow_job webhook actions the test server sends, by their x-webhooks key. */
export const WEBHOOK_ACTIONS = { queued: "workflow-job-queued", in_progress: "workflow-job-in-progress", completed: "workflow-job-completed" } as const;
export type WebhookAction = keyof typeof WEBHOOK_ACTIONS;

export interface WebhookSchema {
  readonly schema: object;
  readonly validate: ValidateFunction;
}

export class OpenApiContract {
  readonly operations: readonly Operation[];
  /** The documented payload of each workflow_job action (x-webhooks in the description). */
  readonly webhooks: ReadonlyMap<WebhookAction, WebhookSchema>;
  readonly #basicError: ValidateFunction;

  private constructor(operations: Operation[], basicError: ValidateFunction, webhooks: Map<WebhookAction, WebhookSchema>) {
    this.operations = operations;
    this.#basicError = basicError;
    this.webhooks = webhooks;
  }

  /** Problems with a webhook payload the test server is about to send. */
  checkWebhook(action: WebhookAction, payload: unknown): string[] {
    const hook = this.webhooks.get(action);
    if (hook === undefined) return [`no documented payload for workflow_job ${action}`];
    return hook.validate(payload) ? [] : [`workflow_job ${action} payload: ${describeErrors(hook.validate.errors)}`];
  }

  static #loaded: OpenApiContract | undefined;

  /** Parses the descriptions once per process (about a second for the two files). */
  static load(): OpenApiContract {
    if (OpenApiContract.#loaded !== undefined) return OpenApiContract.#loaded;
    const ajv = new Ajv({ strict: false, allErrors: true, coerceTypes: false });
    addFormats(ajv);
    const descriptions = new Map<Description, ReturnType<typeof loadDescription>>();
    const description = (from: Description): ReturnType<typeof loadDescription> => {
      let d = descriptions.get(from);
      if (d === undefined) descriptions.set(from, (d = loadDescription(from)));
      return d;
    };
    let basicErrorSchema: object | undefined;
    const operations = OPERATIONS.map(({ method, path, from }) => {
      const raw = description(from).paths[path]?.[method];
      if (raw === undefined) throw new Error(`${method.toUpperCase()} ${path} is not in the ${from} OpenAPI description`);
      const responses = new Map<number, ValidateFunction | "no-content">();
      const responseSchemas = new Map<number, object>();
      for (const [status, response] of Object.entries(raw.responses)) {
        const schema = response.content?.["application/json"]?.schema;
        responses.set(Number(status), schema === undefined ? "no-content" : ajv.compile(schema));
        if (schema !== undefined) responseSchemas.set(Number(status), schema);
        if (schema !== undefined && (schema as { title?: string }).title === "Basic Error") basicErrorSchema ??= schema;
      }
      const bodySchema = raw.requestBody?.content?.["application/json"]?.schema;
      const pathNames = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] ?? "");
      return {
        method: method.toUpperCase(),
        template: path,
        operationId: raw.operationId,
        enabledForGitHubApps: raw["x-github"]?.enabledForGitHubApps ?? false,
        regex: new RegExp(`^${path.replace(/\{[^}]+\}/g, "([^/]+)")}$`),
        pathNames,
        parameters: raw.parameters ?? [],
        requestBody: bodySchema === undefined ? undefined : { required: raw.requestBody?.required ?? false, validate: ajv.compile(bodySchema) },
        responses,
        responseSchemas,
      };
    });
    if (basicErrorSchema === undefined) throw new Error("no Basic Error schema found in the described operations");
    const webhooks = new Map<WebhookAction, WebhookSchema>();
    const hooks = (description("api.github.com") as { "x-webhooks"?: Record<string, { post?: RawOperation }> })["x-webhooks"] ?? {};
    for (const [action, key] of Object.entries(WEBHOOK_ACTIONS) as Array<[WebhookAction, string]>) {
      const schema = hooks[key]?.post?.requestBody?.content?.["application/json"]?.schema;
      if (schema === undefined) throw new Error(`x-webhooks ${key} is not in the api.github.com OpenAPI description`);
      webhooks.set(action, { schema, validate: ajv.compile(schema) });
    }
    OpenApiContract.#loaded = new OpenApiContract(operations, ajv.compile(basicErrorSchema), webhooks);
    return OpenApiContract.#loaded;
  }

  /** The operation for a request, with its decoded path parameters. */
  match(method: string, pathname: string): { operation: Operation; pathParams: Record<string, string> } | undefined {
    for (const operation of this.operations) {
      if (operation.method !== method) continue;
      const m = operation.regex.exec(pathname);
      if (m === null) continue;
      const pathParams: Record<string, string> = {};
      operation.pathNames.forEach((name, i) => (pathParams[name] = decodeURIComponent(m[i + 1] ?? "")));
      return { operation, pathParams };
    }
    return undefined;
  }

  /** Problems with a request: parameters by their schema types, unknown query parameters, the JSON body. */
  checkRequest(operation: Operation, pathParams: Record<string, string>, query: URLSearchParams, contentType: string | undefined, body: unknown): string[] {
    const problems: string[] = [];
    const declared = new Set(operation.parameters.map((p) => `${p.in}:${p.name}`));
    for (const name of query.keys()) if (!declared.has(`query:${name}`)) problems.push(`query parameter "${name}" is not declared`);
    for (const p of operation.parameters) {
      const raw = p.in === "path" ? pathParams[p.name] : p.in === "query" ? (query.get(p.name) ?? undefined) : undefined;
      if (raw === undefined) {
        if (p.required === true && p.in !== "header") problems.push(`${p.in} parameter "${p.name}" is required`);
        continue;
      }
      const type = (p.schema as { type?: string }).type;
      if (type === "integer" && !/^-?\d+$/.test(raw)) problems.push(`${p.in} parameter "${p.name}"=${JSON.stringify(raw)} is not an integer`);
      if (type === "boolean" && raw !== "true" && raw !== "false") problems.push(`${p.in} parameter "${p.name}" is not a boolean`);
      if (p.in === "path" && raw.length === 0) problems.push(`path parameter "${p.name}" is empty`);
    }
    if (operation.requestBody === undefined) {
      if (body !== undefined) problems.push("the operation takes no request body, one was sent");
    } else if (body === undefined) {
      if (operation.requestBody.required) problems.push("the request body is required");
    } else {
      if (!(contentType ?? "").startsWith("application/json")) problems.push(`content-type ${JSON.stringify(contentType ?? null)} is not application/json`);
      if (!operation.requestBody.validate(body)) problems.push(`request body: ${describeErrors(operation.requestBody.validate.errors)}`);
    }
    return problems;
  }

  /** Problems with a response: an undocumented status, a body where none belongs, a body off its schema. */
  checkResponse(operation: Operation, status: number, body: unknown): string[] {
    const documented = operation.responses.get(status);
    if (documented === undefined) {
      if (!GENERIC_ERROR_STATUSES.has(status)) return [`status ${status} is not documented for ${operation.operationId}`];
      return this.#basicError(body) ? [] : [`status ${status} body is not a Basic Error: ${describeErrors(this.#basicError.errors)}`];
    }
    if (documented === "no-content") return body === undefined ? [] : [`status ${status} is documented without a body, one was sent`];
    if (body === undefined) return [`status ${status} needs a JSON body`];
    return documented(body) ? [] : [`response ${status} body: ${describeErrors(documented.errors)}`];
  }
}
