import { createHmac, randomUUID } from "node:crypto";

/**
 * Sends webhooks the way GitHub does: POST JSON with X-GitHub-Event, X-GitHub-Delivery (a GUID
 * that a redelivery reuses), X-GitHub-Hook-ID and X-Hub-Signature-256 (HMAC-SHA256 of the raw
 * body, hex, "sha256=" prefix). Faults: drop the next N deliveries, or send the next N twice
 * with the same delivery id; and `replay`, which sends a body delivered before again, validly
 * signed, under a new delivery id (the delivery id is not signed): what whoever kept old bodies can do.
 */
export interface SentWebhook {
  readonly deliveryId: string;
  readonly event: string;
  readonly action: string;
  readonly status: number | "dropped" | "failed";
  /** The payload as delivered (for `replay`). */
  readonly payload: Record<string, unknown>;
}

export class WebhookSender {
  target: { url: string; secret: string } | undefined;
  dropNext = 0;
  duplicateNext = 0;
  readonly sent: SentWebhook[] = [];
  readonly #pending = new Set<Promise<void>>();

  deliver(event: string, payload: Record<string, unknown>): void {
    const target = this.target;
    if (target === undefined) return;
    const deliveryId = randomUUID();
    const action = typeof payload["action"] === "string" ? payload["action"] : "";
    if (this.dropNext > 0) {
      this.dropNext--;
      this.sent.push({ deliveryId, event, action, status: "dropped", payload });
      return;
    }
    const times = this.duplicateNext > 0 ? 2 : 1;
    if (times === 2) this.duplicateNext--;
    const body = JSON.stringify(payload);
    const signature = `sha256=${createHmac("sha256", target.secret).update(body).digest("hex")}`;
    const send = async (): Promise<void> => {
      for (let i = 0; i < times; i++) {
        try {
          const response = await fetch(target.url, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "user-agent": "GitHub-Hookshot/imp-test",
              "x-github-event": event,
              "x-github-delivery": deliveryId,
              "x-github-hook-id": "1",
              "x-hub-signature-256": signature,
            },
            body,
            signal: AbortSignal.timeout(10_000),
          });
          await response.arrayBuffer();
          this.sent.push({ deliveryId, event, action, status: response.status, payload });
        } catch {
          this.sent.push({ deliveryId, event, action, status: "failed", payload });
        }
      }
    };
    // Deliveries are in order, as a single GitHub hook delivers them (mostly): chain them.
    const previous = [...this.#pending].at(-1) ?? Promise.resolve();
    const p = previous.then(send);
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }

  /** Sends `delivery`'s body again, signed, under a new delivery id; resolves once it was answered. */
  async replay(delivery: SentWebhook): Promise<SentWebhook | undefined> {
    const before = this.sent.length;
    this.deliver(delivery.event, delivery.payload);
    await this.settled();
    return this.sent.slice(before).at(-1);
  }

  /** Resolves when every delivery started so far has been answered (or failed). */
  async settled(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }
}
