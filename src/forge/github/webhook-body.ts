import { DEFAULT_MAX_WEBHOOK_BYTES } from "./webhook-signature.ts";

/**
 * Reads a webhook request body without ever holding more than `maxBytes` of it: a declared
 * Content-Length over the limit is refused before reading, and a body that grows past it is
 * abandoned at that point (the caller answers 413 and closes the connection).
 */
export type BodyRead = { readonly ok: true; readonly body: Buffer } | { readonly ok: false; readonly reason: string };

export async function readWebhookBody(
  stream: AsyncIterable<Uint8Array>,
  contentLength: string | undefined,
  maxBytes: number = DEFAULT_MAX_WEBHOOK_BYTES,
): Promise<BodyRead> {
  if (contentLength !== undefined && Number(contentLength) > maxBytes) {
    return { ok: false, reason: `declared body of ${contentLength} bytes exceeds the limit of ${maxBytes}` };
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of stream) {
    size += chunk.byteLength;
    if (size > maxBytes) return { ok: false, reason: `body exceeds the limit of ${maxBytes} bytes` };
    chunks.push(chunk);
  }
  return { ok: true, body: Buffer.concat(chunks) };
}
