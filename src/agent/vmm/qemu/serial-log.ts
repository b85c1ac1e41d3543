import { createWriteStream, type WriteStream } from "node:fs";

/** Console lines that mean the guest will never come up; seeing one lets a boot fail at once. */
export const FATAL_CONSOLE_PATTERNS: readonly RegExp[] = [
  /Kernel panic - not syncing/,
  /imp-initramfs: FATAL: .*/,
];

/**
 * The first complete fatal console line in `text`, if any. Pure. A line counts only once its
 * newline has arrived: the console delivers lines in pieces, and a half line would hide the reason.
 */
export function findFatalConsoleLine(text: string): string | undefined {
  for (const pattern of FATAL_CONSOLE_PATTERNS) {
    const global = new RegExp(pattern.source, "g");
    for (const match of text.matchAll(global)) {
      const end = text.indexOf("\n", match.index);
      if (end < 0) break;
      const start = text.lastIndexOf("\n", match.index) + 1;
      return text.slice(start, end).trim();
    }
  }
  return undefined;
}

/**
 * The guest's serial console: every byte appended to a file (kept for failed tests and post-mortems)
 * and the last `tailBytes` kept in memory for error messages. The console is guest output, so it is
 * untrusted: it is stored and shown, never interpreted beyond {@link findFatalConsoleLine}.
 */
export class SerialLog {
  readonly path: string;
  readonly #file: WriteStream;
  readonly #tailBytes: number;
  #tail = "";
  #fatal: string | undefined;
  readonly #onFatal: (line: string) => void;

  constructor(path: string, options: { tailBytes?: number; onFatal?: (line: string) => void } = {}) {
    this.path = path;
    this.#file = createWriteStream(path, { flags: "a" });
    this.#file.on("error", () => undefined); // a full disk must not crash the host; the tail still works
    this.#tailBytes = options.tailBytes ?? 64 * 1024;
    this.#onFatal = options.onFatal ?? (() => undefined);
  }

  /** Appends console output. */
  push(chunk: Buffer): void {
    this.#file.write(chunk);
    // Look for fatal lines across chunk boundaries by scanning the tail, which holds the previous bytes.
    this.#tail = (this.#tail + chunk.toString("utf8")).slice(-this.#tailBytes);
    if (this.#fatal === undefined) {
      const line = findFatalConsoleLine(this.#tail);
      if (line !== undefined) {
        this.#fatal = line;
        this.#onFatal(line);
      }
    }
  }

  /** The last bytes of the console (at most `tailBytes`), or the last `lines` lines of them. */
  tail(lines?: number): string {
    if (lines === undefined) return this.#tail;
    return this.#tail.split("\n").slice(-lines).join("\n");
  }

  /** The first fatal console line seen, if any. */
  get fatalLine(): string | undefined {
    return this.#fatal;
  }

  /** Flushes and closes the file. Idempotent. */
  async close(): Promise<void> {
    if (this.#file.closed) return;
    await new Promise<void>((resolve) => this.#file.end(resolve));
  }
}
