import { open, type FileHandle } from "node:fs/promises";
import { StringDecoder } from "node:string_decoder";

/**
 * Console lines that mean the guest will never come up; seeing one lets a boot fail at once. They
 * count only until the guest agent answers: from then on the console is the job's to write, and a
 * job printing one of them must not turn its VM into a failed boot.
 */
export const FATAL_CONSOLE_PATTERNS: readonly RegExp[] = [
  /Kernel panic - not syncing/,
  /imp-initramfs: FATAL: .*/,
];

/**
 * The first complete fatal console line in `text`, if any. Pure. A line counts only once its
 * newline has arrived: the console delivers lines in pieces, and a half line would hide the reason.
 */
export function findFatalConsoleLine(text: string, patterns: readonly RegExp[] = FATAL_CONSOLE_PATTERNS): string | undefined {
  for (const pattern of patterns) {
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

/** Console bytes a VM may write before it counts as flooding (a boot log is ~50 KB, the agent's own lines a few KB per exec). */
export const DEFAULT_MAX_CONSOLE_BYTES = 16 * 1024 * 1024;

/**
 * The bound a VMM's supervisor keeps on its console file: the agent's own limit plus room for the
 * agent's stop of a flooding VM (a TCG guest writes a few hundred KiB/s; the stop takes seconds),
 * so that an agent that watches acts first, and the supervisor is the backstop while none does.
 */
export function supervisedConsoleBound(maxConsoleBytes: number): number {
  return maxConsoleBytes + 4 * 1024 * 1024;
}

/**
 * The guest's serial console, which the VMM appends to a file (QEMU's `serial.log`, Firecracker's
 * `console.log`): this follows the file (polling every `pollMs`; inotify would add little for one
 * small file and misses nothing a poll would catch), keeps the last `tailBytes` in memory for error
 * messages, and, while armed, reports the first fatal line. The console is guest output, so it is
 * untrusted: it is stored and shown, and interpreted only by {@link findFatalConsoleLine} during boot
 * ({@link disarm} ends that once the guest agent answered; `armed: false` for a VM adopted after its
 * boot). Memory stays bounded whatever the guest writes (64 KiB reads, a `tailBytes` tail); the file
 * itself is on the node's disk, so once it passes `maxBytes` the log reports `onOverflow` once and
 * the owner stops the VM (neither VMM bounds its console file).
 */
export class ConsoleLog {
  readonly path: string;
  readonly #tailBytes: number;
  readonly #pollMs: number;
  readonly #onFatal: (line: string) => void;
  readonly #fatalPatterns: readonly RegExp[];
  readonly #maxBytes: number;
  readonly #onOverflow: (bytes: number) => void;
  #overflowed = false;
  #armed: boolean;
  readonly #decoder = new StringDecoder("utf8");
  readonly #chunk = Buffer.alloc(64 * 1024);
  #tail = "";
  #fatal: string | undefined;
  #file: FileHandle | undefined;
  #offset = 0;
  #reading: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  #closed: Promise<void> | undefined;

  /** `fatalPatterns`: what counts as fatal (default the guest console's); another log the VMM writes can be followed alike. */
  constructor(path: string, options: { tailBytes?: number; pollMs?: number; onFatal?: (line: string) => void; fatalPatterns?: readonly RegExp[]; maxBytes?: number; onOverflow?: (bytes: number) => void; armed?: boolean } = {}) {
    this.path = path;
    this.#armed = options.armed ?? true;
    this.#tailBytes = options.tailBytes ?? 64 * 1024;
    this.#pollMs = options.pollMs ?? 50;
    this.#onFatal = options.onFatal ?? (() => undefined);
    this.#fatalPatterns = options.fatalPatterns ?? FATAL_CONSOLE_PATTERNS;
    this.#maxBytes = options.maxBytes ?? DEFAULT_MAX_CONSOLE_BYTES;
    this.#onOverflow = options.onOverflow ?? (() => undefined);
  }

  /** Bytes of the console read so far. */
  get bytes(): number {
    return this.#offset;
  }

  /** Starts following the file (which may not exist yet). */
  start(): this {
    if (this.#timer === undefined && this.#closed === undefined) {
      this.#timer = setInterval(() => void this.poll(), this.#pollMs);
      this.#timer.unref();
    }
    return this;
  }

  /** Reads what was appended since the last read. Reads never overlap; errors count as "nothing new". */
  poll(): Promise<void> {
    this.#reading = this.#reading.then(() => this.#readNew()).catch(() => undefined);
    return this.#reading;
  }

  async #readNew(): Promise<void> {
    if (this.#file === undefined) {
      try {
        this.#file = await open(this.path, "r");
      } catch {
        return; // QEMU has not created it yet
      }
    }
    for (;;) {
      const { bytesRead } = await this.#file.read(this.#chunk, 0, this.#chunk.length, this.#offset);
      if (bytesRead === 0) return;
      this.#offset += bytesRead;
      this.#append(this.#decoder.write(this.#chunk.subarray(0, bytesRead)));
      if (this.#offset > this.#maxBytes && !this.#overflowed) {
        this.#overflowed = true;
        this.#onOverflow(this.#offset);
      }
    }
  }

  #append(text: string): void {
    // Look for fatal lines across read boundaries by scanning the tail, which holds the previous bytes.
    this.#tail = (this.#tail + text).slice(-this.#tailBytes);
    if (this.#armed && this.#fatal === undefined) {
      const line = findFatalConsoleLine(this.#tail, this.#fatalPatterns);
      if (line !== undefined) {
        this.#fatal = line;
        this.#onFatal(line);
      }
    }
  }

  /** The last characters of the console read so far (at most `tailBytes`), or the last `lines` lines of them. */
  tail(lines?: number): string {
    if (lines === undefined) return this.#tail;
    return this.#tail.split("\n").slice(-lines).join("\n");
  }

  /**
   * Stops interpreting the console: lines read from now on are never fatal. Called once the guest
   * agent answered, after which the workload may write anything to the console. What was already
   * read stays as judged (a panic during boot still ended the boot).
   */
  disarm(): void {
    this.#armed = false;
  }

  /** The first fatal console line seen while armed, if any. */
  get fatalLine(): string | undefined {
    return this.#fatal;
  }

  /** Reads the file to its end one last time and stops following it. Idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      clearInterval(this.#timer);
      await this.poll();
      await this.#file?.close().catch(() => undefined);
    })();
    return this.#closed;
  }
}
