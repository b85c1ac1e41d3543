/**
 * HTTP helpers for talking to registries: classify a response status into Imp's error classes (429,
 * 408 and 5xx retryable with the server's Retry-After; other 4xx terminal), and read bodies with a hard
 * byte limit because registry responses are untrusted input.
 */
import type { ImpError } from "../../../shared/index.ts";
import { retryableError, terminalError } from "../../../shared/index.ts";

/** Milliseconds a `Retry-After` header asks for (seconds or an HTTP date), undefined when absent/invalid. */
export function parseRetryAfter(header: string | null, nowMs: number): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const trimmed = header.trim();
  if (/^\d{1,9}$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/** The error for a non-success response: retryable for 408/429/5xx (carrying `retryAfterMs`), terminal otherwise. */
export async function statusError(res: Response, what: string, nowMs: number): Promise<ImpError> {
  const detail = await registryErrorDetail(res);
  const message = `Cannot ${what}: registry answered ${res.status}${detail === "" ? "" : ` (${detail})`}`;
  const retryAfterMs = parseRetryAfter(res.headers.get("retry-after"), nowMs);
  const context = { status: res.status, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) };
  if (res.status === 408 || res.status === 429 || res.status >= 500) return retryableError("RegistryUnavailable", message, { context });
  const code = res.status === 404 ? "NotFound" : res.status === 401 ? "Unauthorized" : res.status === 403 ? "Forbidden" : "RegistryRejected";
  return terminalError(code, message, { context });
}

// The distribution spec's error body: {"errors":[{"code","message"}]}. Read at most 4 KiB of it.
async function registryErrorDetail(res: Response): Promise<string> {
  try {
    const text = Buffer.from(await readBounded(res, 4096, "error body", true)).toString("utf8");
    const parsed = JSON.parse(text) as { errors?: { code?: unknown; message?: unknown }[] };
    const first = parsed.errors?.[0];
    if (first === undefined) return "";
    return [first.code, first.message].filter((x) => typeof x === "string").join(": ").slice(0, 200);
  } catch {
    return "";
  }
}

/**
 * Reads a whole body, failing (terminal) once it passes `maxBytes`. With `truncate`, returns the first
 * `maxBytes` instead of failing (for error bodies).
 */
export async function readBounded(res: Response, maxBytes: number, what: string, truncate = false): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length") ?? "NaN");
  if (!truncate && Number.isFinite(declared) && declared > maxBytes) {
    await res.body?.cancel().catch(() => undefined);
    throw terminalError("ResponseTooLarge", `Cannot read ${what}: ${declared} bytes is more than the limit of ${maxBytes}`);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (res.body === null) return new Uint8Array(0);
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        if (truncate) {
          chunks.push(value.subarray(0, value.byteLength - (total - maxBytes)));
          break;
        }
        throw terminalError("ResponseTooLarge", `Cannot read ${what}: more than the limit of ${maxBytes} bytes`);
      }
      chunks.push(value);
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks);
}

const LOOPBACK = /^(localhost|127(?:\.\d{1,3}){3}|\[::1\])(?::\d+)?$/;

/** Registries on loopback speak plain HTTP (like Docker's default); everything else HTTPS unless configured. */
export const isLoopbackRegistry = (registry: string): boolean => LOOPBACK.test(registry);
