/**
 * The forges' webhook receiver, on node:http: POST /webhooks/github (GitHub's `workflow_job`,
 * X-Hub-Signature-256) and POST /webhooks/gitea (Gitea's, X-Gitea-Signature). Everything a
 * webhook carries is untrusted until proven otherwise: the body is read up to `maxBodyBytes` (413
 * beyond), the signature is checked in constant time against the secrets trusted for that forge's
 * pools (src/forge/github, src/forge/gitea), the payload is parsed field by field, and a delivery id seen
 * before is acknowledged without acting again. Anything invalid is answered 4xx and changes
 * nothing. Only then is the event handed on (`onEvent`, which only updates in-memory demand and
 * enqueues pools).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Counter, Registry } from "prom-client";
import { Counter as PromCounter } from "prom-client";
import { acceptWebhook, DEFAULT_MAX_WEBHOOK_BYTES, DeliveryDeduplicator, type WebhookDelivery, type WebhookOptions, type WebhookVerdict, type WorkflowJobEvent } from "../../forge/index.ts";
import { acceptGiteaWebhook } from "../../forge/index.ts";
import type { ForgeFamily } from "../forges/index.ts";
import { describeError, systemClock, type Clock, type Logger } from "../../shared/index.ts";
import type { WebhookAudience, WebhookTrust } from "./webhook-secrets.ts";

export const WEBHOOK_PATH = "/webhooks/github";
export const GITEA_WEBHOOK_PATH = "/webhooks/gitea";
const FORGE_OF_PATH: Readonly<Record<string, ForgeFamily>> = { [WEBHOOK_PATH]: "github", [GITEA_WEBHOOK_PATH]: "gitea" };
const ACCEPT: Readonly<Record<ForgeFamily, (d: WebhookDelivery, o: WebhookOptions) => Promise<WebhookVerdict>>> = { github: acceptWebhook, gitea: acceptGiteaWebhook };
export const DEFAULT_WEBHOOK_PORT = 8090;

export interface WebhookServerOptions {
  /** One secret, or two while rotating (both accepted); GitHub deliveries signed with them speak for every GitHub pool. */
  readonly secrets: readonly string[];
  /**
   * Further secrets, each trusted for some pools of one forge only (the pools' spec.webhook.secretRef),
   * asked for on every delivery; `secrets` may then be empty. The first group whose secret matches decides.
   */
  readonly trust?: (forge: ForgeFamily, signal?: AbortSignal) => Promise<readonly WebhookTrust[]>;
  /** `audience`: the pools the matching secret is trusted for. */
  readonly onEvent: (forge: ForgeFamily, event: WorkflowJobEvent, audience: WebhookAudience) => void;
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
    this.#received = new PromCounter({ name: "imp_operator_webhooks_total", help: "Webhook deliveries by forge (github, gitea; none for an unknown path) and result.", labelNames: ["forge", "result"], registers: [options.registry] });
    for (const forge of ["github", "gitea"]) for (const r of WEBHOOK_RESULTS) this.#received.inc({ forge, result: r }, 0);
    this.#received.inc({ forge: "none", result: "not_found" }, 0);
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
    this.#o.logger.info({ url: this.#url, paths: Object.keys(FORGE_OF_PATH) }, "webhook receiver listening");
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? "/", "http://localhost").pathname;
    const forge = FORGE_OF_PATH[path];
    if (forge === undefined) return this.#reply(res, "none", 404, "not_found", "not found");
    if (req.method !== "POST") return this.#reply(res, forge, 405, "rejected", "only POST", { allow: "POST" });
    const declared = Number(req.headers["content-length"] ?? "0");
    if (declared > this.#maxBodyBytes) {
      req.resume();
      return this.#reply(res, forge, 413, "too_large", "payload too large", { connection: "close" });
    }
    let body: Buffer;
    try {
      body = await this.#readBody(req);
    } catch (err) {
      if (err instanceof TooLarge) return this.#reply(res, forge, 413, "too_large", "payload too large", { connection: "close" });
      throw err;
    }
    const { verdict, audience } = await this.#verify(forge, req, body);
    if (verdict.kind === "rejected" && verdict.ignored === true) {
      // Signed by the forge but not an event or action Imp acts on (ping, other subscribed events, Gitea's `waiting`).
      return this.#reply(res, forge, 204, "ignored", "");
    }
    if (verdict.kind === "rejected") {
      // The reason is ours (never the payload), safe to log; a forged delivery is worth a warning.
      this.#o.logger.warn({ forge, reason: verdict.reason, authentic: verdict.authentic }, "webhook rejected");
      return this.#reply(res, forge, verdict.authentic ? 400 : 401, "rejected", verdict.authentic ? "unsupported event" : "bad signature");
    }
    // Each forge numbers its own deliveries.
    if (!this.#dedup.firstDelivery(`${forge}/${verdict.event.deliveryId}`)) return this.#reply(res, forge, 200, "duplicate", "duplicate delivery ignored");
    this.#o.onEvent(forge, verdict.event, audience);
    return this.#reply(res, forge, 202, "accepted", "accepted");
  }

  /**
   * Tries each trust group of the forge until one's secret matches; an unmatched delivery is
   * refused as unsigned. The operator's own secrets are GitHub's (the App's): they never sign for Gitea.
   */
  async #verify(forge: ForgeFamily, req: IncomingMessage, body: Buffer): Promise<{ verdict: WebhookVerdict; audience: WebhookAudience }> {
    const groups: WebhookTrust[] = forge === "github" && this.#o.secrets.length > 0 ? [{ secrets: this.#o.secrets, audience: "all" }] : [];
    if (this.#o.trust !== undefined) groups.push(...(await this.#o.trust(forge)).filter((g) => g.secrets.length > 0));
    let verdict: WebhookVerdict = { kind: "rejected", reason: `no webhook secret is configured for a ${forge} pool`, authentic: false };
    for (const group of groups) {
      verdict = await ACCEPT[forge]({ headers: req.headers, body }, { secrets: group.secrets, maxBodyBytes: this.#maxBodyBytes });
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

  #reply(res: ServerResponse, forge: ForgeFamily | "none", status: number, result: WebhookResult, message: string, headers: Record<string, string> = {}): void {
    this.#received.inc({ forge, result });
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", ...headers }).end(status === 204 ? undefined : `${message}\n`);
  }
}
