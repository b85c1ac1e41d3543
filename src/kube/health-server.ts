import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";
import { describeError, retryableError, silentLogger, type Logger } from "../shared/index.ts";

/** Anything whose first sync readiness waits for: an `Informer`, or a test double. */
export interface SyncedCache {
  hasSynced(): boolean;
}

export interface HealthServerOptions {
  /** Served at /metrics in the Prometheus text format. */
  readonly registry: Registry;
  /** Readiness waits until every one of these has synced; the names appear in /readyz. */
  readonly caches?: Readonly<Record<string, SyncedCache>>;
  /** Reported in /readyz (not a readiness condition: a standby replica is ready too). */
  readonly isLeader?: () => boolean;
  /** Default 127.0.0.1: probes and scrapes come from the node or a sidecar, not the world. */
  readonly host?: string | undefined;
  /** Default `DEFAULT_HEALTH_PORT`; 0 picks a free port (tests), see `url()`. */
  readonly port?: number;
  /** How long a stop waits for open requests before cutting their connections. */
  readonly closeTimeoutMs?: number;
  readonly logger?: Logger;
}

/** controller-runtime's health-probe port. */
export const DEFAULT_HEALTH_PORT = 8081;
const DEFAULT_CLOSE_TIMEOUT_MS = 2_000;

/** What /readyz answers, as JSON. */
export interface Readiness {
  readonly ready: boolean;
  readonly leader: boolean | undefined;
  readonly caches: Readonly<Record<string, boolean>>;
}

/**
 * The manager's HTTP endpoints, on `node:http` (three fixed GET routes do not need a framework):
 * - `/healthz` liveness: 200 while the process serves requests at all (a wedged event loop fails it);
 * - `/readyz` readiness: 200 once every cache has synced, else 503; the JSON body names each cache
 *   and says whether this replica leads;
 * - `/metrics`: the prom-client registry.
 * A `Runnable`: `start(signal)` listens, and resolves once the socket is closed after `signal` aborts.
 * Add it with `Manager.addHealthServer` so it answers while caches sync and until everything stopped.
 */
export class HealthServer {
  readonly #options: HealthServerOptions;
  readonly #logger: Logger;
  #url: string | undefined;
  #started = false;
  readonly #listening: { promise: Promise<string>; resolve: (url: string) => void; reject: (err: unknown) => void };

  constructor(options: HealthServerOptions) {
    this.#options = options;
    this.#logger = (options.logger ?? silentLogger).child({ part: "health-server" });
    let resolve: (url: string) => void = () => undefined;
    let reject: (err: unknown) => void = () => undefined;
    const promise = new Promise<string>((res, rej) => ((resolve = res), (reject = rej)));
    promise.catch(() => undefined); // observed through start() as well
    this.#listening = { promise, resolve, reject };
  }

  /** `http://host:port` once listening (the real port when 0 was asked for). */
  url(): string | undefined {
    return this.#url;
  }

  /** Resolves with `url()` once listening; rejects if binding failed. */
  listening(): Promise<string> {
    return this.#listening.promise;
  }

  readiness(): Readiness {
    const caches = Object.fromEntries(Object.entries(this.#options.caches ?? {}).map(([name, cache]) => [name, cache.hasSynced()]));
    return { ready: Object.values(caches).every(Boolean), leader: this.#options.isLeader?.(), caches };
  }

  async start(signal: AbortSignal): Promise<void> {
    if (this.#started) throw new Error("Cannot start health server: already started");
    this.#started = true;
    const server = createServer((req, res) => void this.#handle(req, res));
    const host = this.#options.host ?? "127.0.0.1";
    const port = this.#options.port ?? DEFAULT_HEALTH_PORT;
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen({ host, port }, () => {
          server.off("error", reject);
          resolve();
        });
      });
    } catch (err) {
      const failure = retryableError("HealthServerListenFailed", `Cannot listen on ${host}:${port}: ${describeError(err)}`, { cause: err });
      this.#listening.reject(failure);
      throw failure;
    }
    const address = server.address() as AddressInfo;
    this.#url = `http://${address.family === "IPv6" ? `[${address.address}]` : address.address}:${address.port}`;
    this.#listening.resolve(this.#url);
    this.#logger.info({ url: this.#url }, "serving /healthz, /readyz and /metrics");
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    await this.#close(server);
  }

  async #close(server: Server): Promise<void> {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const timeoutMs = this.#options.closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS;
    const timer = setTimeout(() => server.closeAllConnections(), timeoutMs);
    await closed;
    clearTimeout(timer);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    try {
      if (req.method !== "GET" && req.method !== "HEAD") {
        send(res, 405, "text/plain; charset=utf-8", "method not allowed\n", { allow: "GET, HEAD" });
        return;
      }
      switch (path) {
        case "/healthz":
          send(res, 200, "text/plain; charset=utf-8", "ok\n");
          return;
        case "/readyz": {
          const readiness = this.readiness();
          send(res, readiness.ready ? 200 : 503, "application/json", `${JSON.stringify(readiness)}\n`);
          return;
        }
        case "/metrics": {
          const { registry } = this.#options;
          send(res, 200, registry.contentType, await registry.metrics());
          return;
        }
        default:
          send(res, 404, "text/plain; charset=utf-8", "not found\n");
      }
    } catch (err) {
      this.#logger.error({ err: describeError(err), path }, "health endpoint failed");
      if (!res.headersSent) send(res, 500, "text/plain; charset=utf-8", "internal error\n");
      else res.destroy();
    }
  }
}

function send(res: ServerResponse, status: number, contentType: string, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": contentType, "cache-control": "no-store", ...headers });
  res.end(res.req.method === "HEAD" ? undefined : body);
}
