import { DEFAULT_MAX_WEBHOOK_BYTES, verifyWebhookSignature } from "./webhook-signature.ts";
import { parseWorkflowJobWebhook, type WebhookParseResult, type WorkflowJobEvent } from "./workflow-job-event.ts";

/**
 * One webhook delivery from the HTTP layer to a typed event or a rejection: size, signature
 * (one or two secrets), headers, payload. The HTTP server answers 2xx only for `accepted`.
 */
export interface WebhookDelivery {
  /** Lower-case header names, as node:http gives them. */
  readonly headers: Readonly<Record<string, string | readonly string[] | undefined>>;
  readonly body: Uint8Array;
}

export interface WebhookOptions {
  readonly secrets: readonly string[];
  readonly maxBodyBytes?: number;
}

export type WebhookVerdict =
  | { readonly kind: "accepted"; readonly event: WorkflowJobEvent }
  | { readonly kind: "rejected"; readonly reason: string; readonly authentic: boolean; readonly ignored?: true };

/** A header that must be given once: its value, or undefined when absent or repeated. */
export function single(value: string | readonly string[] | undefined): string | undefined {
  return typeof value === "string" ? value : undefined;
}

export async function acceptWebhook(delivery: WebhookDelivery, options: WebhookOptions): Promise<WebhookVerdict> {
  const signature = await verifyWebhookSignature(
    delivery.body,
    single(delivery.headers["x-hub-signature-256"]),
    options.secrets,
    options.maxBodyBytes ?? DEFAULT_MAX_WEBHOOK_BYTES,
  );
  if (!signature.ok) return { kind: "rejected", reason: signature.reason, authentic: false };
  const parsed = parseWorkflowJobWebhook(
    single(delivery.headers["x-github-event"]),
    single(delivery.headers["x-github-delivery"]),
    new TextDecoder().decode(delivery.body),
  );
  return verdictOf(parsed);
}

/** An authentic delivery's verdict: accepted, ignored (an event or action Imp does not act on) or rejected as bad input. */
export function verdictOf(parsed: WebhookParseResult): WebhookVerdict {
  if (parsed.ok) return { kind: "accepted", event: parsed.event };
  return { kind: "rejected", reason: parsed.reason, authentic: true, ...(parsed.ignored === true ? { ignored: true as const } : {}) };
}
