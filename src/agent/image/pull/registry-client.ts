/**
 * A client for the OCI distribution API (and Docker Registry v2), pull side only. Written on native
 * fetch rather than taken from npm: the npm clients we found either buffer whole layers in memory,
 * lack the token flow or zstd/OCI index support, or are unmaintained; we need streaming verification
 * into our content store, bounded reads of untrusted responses, and Imp's retry and error classes.
 *
 * Each operation (manifest GET, blob GET + store) is retried as a whole on retryable failures (network
 * errors, 408, 429, 5xx, a stalled stream) with backoff, honouring Retry-After up to a cap. Blob
 * redirects to storage are followed by fetch, which drops our Authorization header when the redirect
 * leaves the registry's origin.
 */
import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import type { BackoffPolicy, Clock } from "../../../shared/index.ts";
import { ImpError, retry, retryableError, terminalError } from "../../../shared/index.ts";
import type { BlobWriter, ContentStore } from "../store/index.ts";
import { isLoopbackRegistry, readBounded, statusError } from "./http.ts";
import { MANIFEST_ACCEPT } from "./media-types.ts";
import type { RegistryAuth } from "./registry-auth.ts";
import type { Descriptor } from "./types.ts";

export interface RegistryClientOptions {
  readonly auth: RegistryAuth;
  readonly clock: Clock;
  readonly fetch?: typeof fetch;
  /** Registries spoken to over plain HTTP; default: loopback ones only. */
  readonly plainHttp?: (registry: string) => boolean;
  readonly retryPolicy?: BackoffPolicy;
  /** Longest Retry-After we honour; longer requests are cut to this. */
  readonly retryAfterCapMs?: number;
  /** Whole-request bound for manifests. */
  readonly requestTimeoutMs?: number;
  /** A blob download that delivers no byte for this long is abandoned (and retried). */
  readonly idleTimeoutMs?: number;
  readonly onRetry?: (what: string, attempt: number, delayMs: number, error: unknown) => void;
}

export interface FetchedManifest {
  readonly bytes: Uint8Array;
  readonly contentType: string | undefined;
  /** sha256 of the bytes as received. */
  readonly digest: string;
}

export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
export const PULL_BACKOFF: BackoffPolicy = { baseMs: 500, factor: 2, capMs: 15_000, jitter: 0.2, maxAttempts: 6 };

export class RegistryClient {
  readonly #o: RegistryClientOptions;

  constructor(options: RegistryClientOptions) {
    this.#o = options;
  }

  /** GETs a manifest or index by tag or digest, bounded to 4 MiB; when asked by digest, checks it. */
  async getManifest(registry: string, repository: string, reference: string, signal?: AbortSignal): Promise<FetchedManifest> {
    const what = `fetch manifest ${registry}/${repository}:${reference}`;
    return this.#withRetry(what, signal, async () => {
      const timeout = AbortSignal.timeout(this.#o.requestTimeoutMs ?? 60_000);
      const sig = signal === undefined ? timeout : AbortSignal.any([signal, timeout]);
      const res = await this.#send(registry, repository, `manifests/${reference}`, MANIFEST_ACCEPT, what, sig);
      const bytes = await readBounded(res, MAX_MANIFEST_BYTES, `manifest ${registry}/${repository}:${reference}`);
      const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
      const expected = reference.startsWith("sha256:") ? reference : res.headers.get("docker-content-digest");
      if (expected !== null && expected.startsWith("sha256:") && expected !== digest) {
        throw terminalError("DigestMismatch", `Cannot ${what}: its content hashes to ${digest}, not ${expected}`, { context: { expected, actual: digest } });
      }
      return { bytes, contentType: res.headers.get("content-type") ?? undefined, digest };
    });
  }

  /**
   * Downloads a blob into the store, verified by digest and size; a no-op when the store has it. A
   * download that breaks off is resumed with a Range request for the rest (the running hash carries
   * over); a server that ignores Range sends the whole blob again and we start over.
   */
  async fetchBlob(
    registry: string,
    repository: string,
    blob: Descriptor,
    store: ContentStore,
    options: { readonly signal?: AbortSignal; readonly onBytes?: (received: number) => void } = {},
  ): Promise<void> {
    const what = `fetch blob ${blob.digest} of ${registry}/${repository}`;
    const writer = await store.begin(blob);
    if (writer === undefined) return;
    try {
      await this.#withRetry(what, options.signal, () => this.#download(registry, repository, writer, what, options));
      options.signal?.throwIfAborted();
    } catch (err) {
      await writer.discard();
      throw err;
    }
    await writer.commit();
  }

  async #download(
    registry: string,
    repository: string,
    writer: BlobWriter,
    what: string,
    options: { readonly signal?: AbortSignal; readonly onBytes?: (received: number) => void },
  ): Promise<void> {
    const blob = writer.expected;
    const idleMs = this.#o.idleTimeoutMs ?? 60_000;
    const idle = new AbortController();
    const timer = setTimeout(() => idle.abort(retryableError("Stalled", `Cannot ${what}: no data for ${idleMs} ms`)), idleMs);
    const sig = options.signal === undefined ? idle.signal : AbortSignal.any([options.signal, idle.signal]);
    try {
      const from = writer.written;
      const res = await this.#send(registry, repository, `blobs/${blob.digest}`, "*/*", what, sig, from > 0 ? `bytes=${from}-` : undefined);
      timer.refresh();
      let expectedLength = blob.size;
      if (res.status === 206) {
        if (from === 0 || !rangeContinues(res.headers.get("content-range"), from, blob.size)) {
          await res.body?.cancel().catch(() => undefined);
          await writer.reset();
          throw retryableError("BadRange", `Cannot ${what}: the registry answered a range we did not ask for (${res.headers.get("content-range") ?? "no Content-Range"})`);
        }
        expectedLength = blob.size - from;
      } else if (from > 0) {
        await writer.reset();
      }
      const declared = res.headers.get("content-length");
      if (declared !== null && Number(declared) !== expectedLength) {
        await res.body?.cancel().catch(() => undefined);
        throw terminalError("SizeMismatch", `Cannot ${what}: registry sends ${declared} bytes, ${expectedLength} expected`, { context: { digest: blob.digest } });
      }
      if (res.body === null) throw retryableError("EmptyBody", `Cannot ${what}: the response has no body`);
      const source = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>, { signal: sig });
      const watched = (async function* () {
        for await (const chunk of source) {
          timer.refresh();
          yield chunk as Uint8Array;
        }
      })();
      await writer.append(watched, { signal: sig, ...(options.onBytes === undefined ? {} : { onBytes: options.onBytes }) }).catch((err: unknown) => {
        throw idle.signal.aborted ? idle.signal.reason : err;
      });
      if (writer.written !== blob.size) throw retryableError("ShortBody", `Cannot ${what}: the response ended after ${writer.written} of ${blob.size} bytes`);
    } finally {
      clearTimeout(timer);
    }
  }

  async #send(registry: string, repository: string, path: string, accept: string, what: string, signal: AbortSignal, range?: string): Promise<Response> {
    const plain = (this.#o.plainHttp ?? isLoopbackRegistry)(registry);
    const url = `${plain ? "http" : "https"}://${registry}/v2/${repository}/${path}`;
    const auth = this.#o.auth;
    let res = await this.#fetch(url, accept, await auth.headerFor(registry, repository, signal), what, signal, range);
    if (res.status === 401) {
      await res.body?.cancel().catch(() => undefined);
      const header = await auth.answerChallenge(registry, repository, res.headers.get("www-authenticate"), signal);
      res = await this.#fetch(url, accept, header, what, signal, range);
      if (res.status === 401) {
        await res.body?.cancel().catch(() => undefined);
        throw auth.rejected(registry, repository);
      }
    }
    if (!res.ok) throw await statusError(res, what, this.#o.clock.now());
    return res;
  }

  async #fetch(url: string, accept: string, authorization: string | undefined, what: string, signal: AbortSignal, range?: string): Promise<Response> {
    const headers: Record<string, string> = { accept };
    if (range !== undefined) headers.range = range;
    if (authorization !== undefined) headers.authorization = authorization;
    try {
      return await (this.#o.fetch ?? fetch)(url, { headers, signal, redirect: "follow" });
    } catch (err) {
      if (signal.aborted) throw signal.reason ?? err;
      throw retryableError("NetworkError", `Cannot ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  #withRetry<T>(what: string, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    const cap = this.#o.retryAfterCapMs ?? 30_000;
    return retry(fn, {
      policy: this.#o.retryPolicy ?? PULL_BACKOFF,
      clock: this.#o.clock,
      ...(signal === undefined ? {} : { signal }),
      delayFor: (err, _attempt, policyDelay) => {
        const asked = err instanceof ImpError ? err.context.retryAfterMs : undefined;
        return typeof asked === "number" ? Math.min(cap, Math.max(asked, 0)) : policyDelay;
      },
      onRetry: (err, attempt, delayMs) => this.#o.onRetry?.(what, attempt, delayMs, err),
    });
  }
}

/** True when a Content-Range header (`bytes START-END/TOTAL`) continues exactly at `from` to the end. */
export function rangeContinues(header: string | null, from: number, size: number): boolean {
  const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(header?.trim() ?? "");
  if (m === null) return false;
  return Number(m[1]) === from && Number(m[2]) === size - 1 && (m[3] === "*" || Number(m[3]) === size);
}
