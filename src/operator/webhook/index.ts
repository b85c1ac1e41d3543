export { WebhookServer, WEBHOOK_PATH, DEFAULT_WEBHOOK_PORT, WEBHOOK_RESULTS, type WebhookServerOptions } from "./webhook-server.ts";
export { PoolWebhookSecrets, DEFAULT_WEBHOOK_SECRET_TTL_MS, type PoolWebhookSecretsOptions, type WebhookAudience, type WebhookTrust } from "./webhook-secrets.ts";
