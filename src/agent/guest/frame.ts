import { terminalError } from "../../shared/index.ts";
import { checkGuestMessage, type GuestMessage } from "./messages.ts";

/** Hard upper bound of a frame body (docs/guest-protocol.md); a larger declared length ends the stream. */
export const MAX_FRAME_BYTES = 1024 * 1024;
const HEADER_BYTES = 4;

/**
 * Encodes one message as a frame: 4-byte big-endian length, then the UTF-8 JSON body.
 * Throws a terminal `GuestRequestTooLarge` error if the body exceeds MAX_FRAME_BYTES.
 */
export function encodeFrame(message: object): Buffer {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  if (body.length > MAX_FRAME_BYTES) {
    throw terminalError("GuestRequestTooLarge", `Cannot encode guest frame: body is ${body.length} bytes, limit ${MAX_FRAME_BYTES} (send less per request)`);
  }
  const frame = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, HEADER_BYTES);
  return frame;
}

/**
 * Splits a byte stream into frame bodies. Memory is bounded by one maximal frame plus one chunk.
 * After `push` throws (oversize frame) the decoder is poisoned: frames cannot be resynchronised, so
 * the caller must close the stream. Not safe for concurrent use (it is synchronous anyway).
 */
export class FrameDecoder {
  readonly #maxFrameBytes: number;
  #chunks: Buffer[] = [];
  #buffered = 0;
  #poisoned = false;

  constructor(maxFrameBytes: number = MAX_FRAME_BYTES) {
    this.#maxFrameBytes = maxFrameBytes;
  }

  /** Bytes held that do not yet form a whole frame. */
  get bufferedBytes(): number {
    return this.#buffered;
  }

  /** Feeds bytes; returns every body completed by them, in order. */
  push(chunk: Uint8Array): Buffer[] {
    if (this.#poisoned) {
      throw terminalError("GuestFrameTooLarge", "Cannot decode guest frame: the stream already sent an oversize frame");
    }
    if (chunk.length > 0) {
      this.#chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));
      this.#buffered += chunk.length;
    }
    const bodies: Buffer[] = [];
    for (;;) {
      if (this.#buffered < HEADER_BYTES) return bodies;
      const length = this.#peek(HEADER_BYTES).readUInt32BE(0);
      if (length > this.#maxFrameBytes) {
        this.#poisoned = true;
        this.#chunks = [];
        this.#buffered = 0;
        throw terminalError(
          "GuestFrameTooLarge",
          `Cannot decode guest frame: declared length ${length} exceeds the limit of ${this.#maxFrameBytes} bytes`,
          { context: { length, limit: this.#maxFrameBytes } },
        );
      }
      if (this.#buffered < HEADER_BYTES + length) return bodies;
      const all = this.#take(HEADER_BYTES + length);
      bodies.push(all.subarray(HEADER_BYTES));
    }
  }

  /** Returns the first n buffered bytes without consuming them, merging chunks only as needed. */
  #peek(n: number): Buffer {
    const first = this.#chunks[0];
    if (first !== undefined && first.length >= n) return first;
    const merged = Buffer.concat(this.#chunks);
    this.#chunks = [merged];
    return merged;
  }

  #take(n: number): Buffer {
    const merged = this.#peek(n);
    const out = Buffer.from(merged.subarray(0, n));
    const rest = merged.subarray(n);
    this.#chunks = rest.length > 0 ? [rest] : [];
    this.#buffered -= n;
    return out;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses and validates one frame body from the guest. Throws a terminal `GuestMessageInvalid` error
 * naming the problem (never echoing more than a short prefix of untrusted content).
 */
export function parseGuestFrame(body: Uint8Array): GuestMessage {
  let value: unknown;
  try {
    value = JSON.parse(utf8.decode(body));
  } catch (err) {
    throw terminalError("GuestMessageInvalid", "Cannot parse guest frame: body is not UTF-8 JSON", { cause: err });
  }
  const checked = checkGuestMessage(value);
  if (!checked.ok) {
    throw terminalError(
      "GuestMessageInvalid",
      `Cannot accept guest message: ${checked.problem.where} ${checked.problem.problem}`.slice(0, 300),
    );
  }
  return checked.message;
}
