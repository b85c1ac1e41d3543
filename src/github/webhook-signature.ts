import { verify } from "@octokit/webhooks-methods";

/**
 * Checks GitHub's X-Hub-Signature-256 (HMAC-SHA256 of the raw body) against one secret, or two
 * while a secret is being rotated (old and new both valid until the App's setting is switched).
 * @octokit/webhooks-methods compares in constant time. Both secrets are always checked, so the
 * time taken does not tell which one matched.
 */
export const DEFAULT_MAX_WEBHOOK_BYTES = 1024 * 1024;

export type SignatureVerdict =
  | { readonly ok: true; readonly secretIndex: number }
  | { readonly ok: false; readonly reason: string };

const SIGNATURE_FORMAT = /^sha256=[0-9a-f]{64}$/;

export async function verifyWebhookSignature(
  body: Uint8Array,
  signatureHeader: string | undefined,
  secrets: readonly string[],
  maxBodyBytes: number = DEFAULT_MAX_WEBHOOK_BYTES,
): Promise<SignatureVerdict> {
  if (secrets.length < 1 || secrets.length > 2 || secrets.some((s) => s.length === 0)) {
    throw new TypeError("webhook verification needs one or two non-empty secrets");
  }
  if (body.byteLength > maxBodyBytes) return { ok: false, reason: `body of ${body.byteLength} bytes exceeds the limit of ${maxBodyBytes}` };
  if (body.byteLength === 0) return { ok: false, reason: "empty body" };
  if (signatureHeader === undefined) return { ok: false, reason: "no X-Hub-Signature-256 header" };
  if (!SIGNATURE_FORMAT.test(signatureHeader)) return { ok: false, reason: "X-Hub-Signature-256 is not sha256=<64 hex digits>" };
  let text: string;
  try {
    // GitHub signs the raw bytes; the library signs a string. Only valid UTF-8 round-trips exactly.
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  } catch {
    return { ok: false, reason: "body is not valid UTF-8" };
  }
  const results = await Promise.all(secrets.map((secret) => verify(secret, text, signatureHeader)));
  const index = results.indexOf(true);
  return index < 0 ? { ok: false, reason: "signature does not match any configured secret" } : { ok: true, secretIndex: index };
}
