export { WebhookServer, WEBHOOK_PATH, DEFAULT_WEBHOOK_PORT, WEBHOOK_RESULTS, type WebhookServerOptions } from "./webhook-server.ts";
