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

/** Where the signature came from, for the rejection reasons (Gitea's X-Gitea-Signature is the same HMAC, in bare hex). */
export interface SignatureHeader {
  readonly value: string | undefined;
  readonly name: string;
}

export async function verifyWebhookSignature(
  body: Uint8Array,
  header: string | undefined | SignatureHeader,
  secrets: readonly string[],
  maxBodyBytes: number = DEFAULT_MAX_WEBHOOK_BYTES,
): Promise<SignatureVerdict> {
  const { value: signatureHeader, name } = typeof header === "object" ? header : { value: header, name: "X-Hub-Signature-256" };
  if (secrets.length < 1 || secrets.length > 2 || secrets.some((s) => s.length === 0)) {
    throw new TypeError("webhook verification needs one or two non-empty secrets");
  }
  if (body.byteLength > maxBodyBytes) return { ok: false, reason: `body of ${body.byteLength} bytes exceeds the limit of ${maxBodyBytes}` };
  if (body.byteLength === 0) return { ok: false, reason: "empty body" };
  if (signatureHeader === undefined) return { ok: false, reason: `no ${name} header` };
  if (!SIGNATURE_FORMAT.test(signatureHeader)) return { ok: false, reason: `${name} is not ${name === "X-Hub-Signature-256" ? "sha256=" : ""}<64 hex digits>` };
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
