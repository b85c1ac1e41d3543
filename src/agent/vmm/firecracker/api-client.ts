import { request as httpRequest } from "node:http";
import { retryableError, terminalError } from "../../../shared/index.ts";
import { DESCRIBE_INSTANCE, type FirecrackerRequest } from "./api-requests.ts";
import { faultError, parseFaultMessage } from "./faults.ts";

/** What `GET /` answers (InstanceInfo). */
export interface FirecrackerInstanceInfo {
  readonly id: string;
  readonly state: "Not started" | "Running" | "Paused";
  readonly vmm_version: string;
  readonly app_name: string;
}

export interface ApiAnswer {
  readonly status: number;
  readonly body: string;
}

// Firecracker's answers are a few hundred bytes; anything far larger is not Firecracker talking.
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * The Firecracker API over its Unix socket, one connection per request (`agent: false`): the API is
 * served by one thread and a handful of requests per VM do not need pooling, and no idle keep-alive
 * socket can outlive the VMM. Every request is bounded by a timeout.
 */
export class FirecrackerApi {
  readonly socketPath: string;
  readonly #vm: string;
  readonly #timeoutMs: number;

  constructor(socketPath: string, options: { readonly vm: string; readonly timeoutMs: number }) {
    this.socketPath = socketPath;
    this.#vm = options.vm;
    this.#timeoutMs = options.timeoutMs;
  }

  /** Sends `req`; resolves with the answer whatever its status. Transport failures and timeouts are retryable. */
  send(req: FirecrackerRequest, options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {}): Promise<ApiAnswer> {
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const payload = req.body === undefined ? undefined : JSON.stringify(req.body);
    const what = `${req.method} ${req.path}`;
    const context = { vm: this.#vm, request: what, socket: this.socketPath };
    return new Promise<ApiAnswer>((resolve, reject) => {
      let settled = false;
      const settle = (fn: () => void): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        fn();
      };
      const http = httpRequest({
        socketPath: this.socketPath,
        path: req.path,
        method: req.method,
        agent: false,
        headers: {
          Accept: "application/json",
          ...(payload === undefined ? {} : { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) }),
        },
      });
      const timer = setTimeout(() => {
        http.destroy();
        settle(() => reject(retryableError("FirecrackerApiTimeout", `Cannot ${what} for VM ${this.#vm}: no answer within ${timeoutMs} ms`, { context })));
      }, timeoutMs);
      const onAbort = (): void => {
        http.destroy();
        settle(() => reject(options.signal?.reason));
      };
      if (options.signal?.aborted === true) {
        onAbort();
        return;
      }
      options.signal?.addEventListener("abort", onAbort, { once: true });
      http.on("error", (err) =>
        settle(() => reject(retryableError("FirecrackerApiUnreachable", `Cannot ${what} for VM ${this.#vm}: ${err.message}`, { cause: err, context }))),
      );
      http.on("response", (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            http.destroy();
            settle(() => reject(terminalError("FirecrackerApiError", `Cannot ${what} for VM ${this.#vm}: answer over ${MAX_ANSWER_BYTES} bytes`, { context })));
            return;
          }
          chunks.push(chunk);
        });
        res.on("end", () => settle(() => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") })));
        res.on("error", (err) =>
          settle(() => reject(retryableError("FirecrackerApiUnreachable", `Cannot ${what} for VM ${this.#vm}: ${err.message}`, { cause: err, context }))),
        );
      });
      http.end(payload);
    });
  }

  /** Sends a PUT (or PATCH) and requires Firecracker's 204; any other answer becomes a classified error. */
  async put(req: FirecrackerRequest, options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {}): Promise<void> {
    const answer = await this.send(req, options);
    if (answer.status !== 204) throw faultError(req, answer.status, parseFaultMessage(answer.body), this.#vm);
  }

  async describeInstance(options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {}): Promise<FirecrackerInstanceInfo> {
    const answer = await this.send(DESCRIBE_INSTANCE, options);
    if (answer.status !== 200) throw faultError(DESCRIBE_INSTANCE, answer.status, parseFaultMessage(answer.body), this.#vm);
    const info = parseInstanceInfo(answer.body);
    if (info === undefined) {
      throw retryableError("FirecrackerApiError", `Cannot read the state of VM ${this.#vm}: GET / answered ${JSON.stringify(answer.body.slice(0, 200))}`, { context: { vm: this.#vm } });
    }
    return info;
  }
}

const STATES: readonly string[] = ["Not started", "Running", "Paused"];

export function parseInstanceInfo(body: string): FirecrackerInstanceInfo | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const o = parsed as Record<string, unknown>;
  if (typeof o.id !== "string" || typeof o.state !== "string" || !STATES.includes(o.state) || typeof o.vmm_version !== "string" || typeof o.app_name !== "string") return undefined;
  return { id: o.id, state: o.state as FirecrackerInstanceInfo["state"], vmm_version: o.vmm_version, app_name: o.app_name };
}
