/**
 * GitHub webhook receiver: POST /webhooks/github on node:http. Everything a webhook carries is
 * untrusted until proven otherwise: the body is read up to `maxBodyBytes` (413 beyond), the
 * X-Hub-Signature-256 is checked in constant time against one or two secrets (rotation) by
 * src/github, the payload is parsed field by field, and a delivery id seen before is acknowledged
 * without acting again. Anything invalid is answered 4xx and changes nothing. Only then is the
 * event handed on (`onEvent`, which only updates in-memory demand and enqueues pools).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Counter, Registry } from "prom-client";
import { Counter as PromCounter } from "prom-client";
import { acceptWebhook, DEFAULT_MAX_WEBHOOK_BYTES, DeliveryDeduplicator, type WebhookVerdict, type WorkflowJobEvent } from "../../github/index.ts";
import { describeError, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import type { WebhookAudience, WebhookTrust } from "./webhook-secrets.ts";

export const WEBHOOK_PATH = "/webhooks/github";
export const DEFAULT_WEBHOOK_PORT = 8090;

export interface WebhookServerOptions {
  /** One secret, or two while rotating (both accepted); deliveries signed with them speak for every pool. */
  readonly secrets: readonly string[];
  /**
   * Further secrets, each trusted for some pools only (the pools' spec.webhook.secretRef), asked
   * for on every delivery; `secrets` may then be empty. The first group whose secret matches decides.
   */
  readonly trust?: (signal?: AbortSignal) => Promise<readonly WebhookTrust[]>;
  /** `audience`: the pools the matching secret is trusted for. */
  readonly onEvent: (event: WorkflowJobEvent, audience: WebhookAudience) => void;
  readonly port?: number;
  readonly host?: string | undefined;
  readonly maxBodyBytes?: number;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly clock?: Clock;
  /** Bounds of the delivery-id memory. */
  readonly dedupMaxEntries?: number;
  readonly dedupTtlMs?: number;
}

export const WEBHOOK_RESULTS = ["accepted", "duplicate", "ignored", "rejected", "too_large", "not_found"] as const;
type WebhookResult = (typeof WEBHOOK_RESULTS)[number];

class TooLarge extends Error {}

export class WebhookServer {
  readonly #o: WebhookServerOptions;
  readonly #dedup: DeliveryDeduplicator;
  readonly #maxBodyBytes: number;
  readonly #received: Counter;
  #server: Server | undefined;
  #url: string | undefined;
  readonly #listening = Promise.withResolvers<string>();

  constructor(options: WebhookServerOptions) {
    if (options.secrets.length > 2 || (options.secrets.length < 1 && options.trust === undefined)) throw new TypeError("the webhook receiver needs one or two secrets");
    this.#o = options;
    this.#maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_WEBHOOK_BYTES;
    this.#dedup = new DeliveryDeduplicator(options.clock ?? systemClock, {
      ...(options.dedupMaxEntries === undefined ? {} : { maxEntries: options.dedupMaxEntries }),
      ...(options.dedupTtlMs === undefined ? {} : { ttlMs: options.dedupTtlMs }),
    });
    this.#received = new PromCounter({ name: "imp_operator_webhooks_total", help: "GitHub webhook deliveries by result.", labelNames: ["result"], registers: [options.registry] });
    for (const r of WEBHOOK_RESULTS) this.#received.inc({ result: r }, 0);
  }

  /** Resolves with the base URL once listening. */
  listening(): Promise<string> {
    return this.#listening.promise;
  }

  url(): string | undefined {
    return this.#url;
  }

  async start(signal: AbortSignal): Promise<void> {
    const server = createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        this.#o.logger.warn({ err: describeError(err) }, "webhook handling failed");
        if (!res.headersSent) res.writeHead(500).end();
        else res.destroy();
      });
    });
    server.requestTimeout = 30_000;
    server.headersTimeout = 10_000;
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.#o.port ?? DEFAULT_WEBHOOK_PORT, this.#o.host ?? "0.0.0.0", () => resolve());
    }).catch((err: unknown) => {
      this.#listening.reject(err);
      throw err;
    });
    const address = server.address() as AddressInfo;
    this.#url = `http://${address.family === "IPv6" ? `[${address.address}]` : address.address}:${address.port}`;
    this.#listening.resolve(this.#url);
    this.#o.logger.info({ url: this.#url, path: WEBHOOK_PATH }, "webhook receiver listening");
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? "/", "http://localhost").pathname;
    if (path !== WEBHOOK_PATH) return this.#reply(res, 404, "not_found", "not found");
    if (req.method !== "POST") return this.#reply(res, 405, "rejected", "only POST", { allow: "POST" });
    const declared = Number(req.headers["content-length"] ?? "0");
    if (declared > this.#maxBodyBytes) {
      req.resume();
      return this.#reply(res, 413, "too_large", "payload too large", { connection: "close" });
    }
    let body: Buffer;
    try {
      body = await this.#readBody(req);
    } catch (err) {
      if (err instanceof TooLarge) return this.#reply(res, 413, "too_large", "payload too large", { connection: "close" });
      throw err;
    }
    const { verdict, audience } = await this.#verify(req, body);
    if (verdict.kind === "rejected" && verdict.authentic && req.headers["x-github-event"] !== "workflow_job") {
      // Signed by GitHub but not an event Imp acts on (ping, other events the App is subscribed to).
      return this.#reply(res, 204, "ignored", "");
    }
    if (verdict.kind === "rejected") {
      // The reason is ours (never the payload), safe to log; a forged delivery is worth a warning.
      this.#o.logger.warn({ reason: verdict.reason, authentic: verdict.authentic }, "webhook rejected");
      return this.#reply(res, verdict.authentic ? 400 : 401, "rejected", verdict.authentic ? "unsupported event" : "bad signature");
    }
    if (!this.#dedup.firstDelivery(verdict.event.deliveryId)) return this.#reply(res, 200, "duplicate", "duplicate delivery ignored");
    this.#o.onEvent(verdict.event, audience);
    return this.#reply(res, 202, "accepted", "accepted");
  }

  /** Tries each trust group until one's secret matches; an unmatched delivery is refused as unsigned. */
  async #verify(req: IncomingMessage, body: Buffer): Promise<{ verdict: WebhookVerdict; audience: WebhookAudience }> {
    const groups: WebhookTrust[] = this.#o.secrets.length > 0 ? [{ secrets: this.#o.secrets, audience: "all" }] : [];
    if (this.#o.trust !== undefined) groups.push(...(await this.#o.trust()).filter((g) => g.secrets.length > 0));
    let verdict: WebhookVerdict = { kind: "rejected", reason: "no webhook secret is configured", authentic: false };
    for (const group of groups) {
      verdict = await acceptWebhook({ headers: req.headers, body }, { secrets: group.secrets, maxBodyBytes: this.#maxBodyBytes });
      if (verdict.kind === "accepted" || verdict.authentic) return { verdict, audience: group.audience };
    }
    return { verdict, audience: new Set() };
  }

  #readBody(req: IncomingMessage): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size > this.#maxBodyBytes) {
          req.removeAllListeners("data");
          req.resume();
          reject(new TooLarge());
          return;
        }
        chunks.push(chunk);
      });
      req.once("end", () => resolve(Buffer.concat(chunks)));
      req.once("error", reject);
    });
  }

  #reply(res: ServerResponse, status: number, result: WebhookResult, message: string, headers: Record<string, string> = {}): void {
    this.#received.inc({ result });
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", ...headers }).end(status === 204 ? undefined : `${message}\n`);
  }
}
