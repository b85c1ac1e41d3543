/**
 * Gitea's `workflow_job` webhook (Gitea 1.24 and later), checked like GitHub's: the body's
 * HMAC-SHA256 under the pool's secret, in constant time, before anything in it is read. Gitea signs
 * with the same HMAC as GitHub but sends it bare in `X-Gitea-Signature` and names the delivery and
 * event `X-Gitea-Delivery` and `X-Gitea-Event`; the payload is GitHub's shape with Gitea's
 * differences (webhook dialect below). Gitea also sends the GitHub-named headers; Imp reads only
 * Gitea's own on this path, so a delivery is read the one way its sender meant.
 */
import { singleHeader as single, GITHUB_WEBHOOK_DIALECT, parseWorkflowJobWebhook, verdictOf, verifyWebhookSignature, DEFAULT_MAX_WEBHOOK_BYTES, type WebhookDelivery, type WebhookDialect, type WebhookOptions, type WebhookVerdict } from "../github/index.ts";

export const GITEA_WEBHOOK_DIALECT: WebhookDialect = {
  ...GITHUB_WEBHOOK_DIALECT,
  deliveryHeader: "X-Gitea-Delivery",
  // Gitea's organization object has `name` (and the deprecated `username`), no `login`.
  organizationLogin: "name",
  // A job not started or not completed carries 1970-01-01T00:00:00Z.
  epochIsUnset: true,
  // A job waiting for its dependencies or an approval: not demand until Gitea queues it (a `queued` delivery follows).
  ignoredActions: ["waiting"],
};

const HEX_SIGNATURE = /^[0-9a-f]{64}$/;

export async function acceptGiteaWebhook(delivery: WebhookDelivery, options: WebhookOptions): Promise<WebhookVerdict> {
  const raw = single(delivery.headers["x-gitea-signature"]);
  // Bare hex only: anything else (GitHub's `sha256=` form included) fails the format check below.
  const value = raw === undefined ? undefined : HEX_SIGNATURE.test(raw) ? `sha256=${raw}` : "not-hex";
  const signature = await verifyWebhookSignature(delivery.body, { name: "X-Gitea-Signature", value }, options.secrets, options.maxBodyBytes ?? DEFAULT_MAX_WEBHOOK_BYTES);
  if (!signature.ok) return { kind: "rejected", reason: signature.reason, authentic: false };
  return verdictOf(parseWorkflowJobWebhook(single(delivery.headers["x-gitea-event"]), single(delivery.headers["x-gitea-delivery"]), new TextDecoder().decode(delivery.body), GITEA_WEBHOOK_DIALECT));
}
