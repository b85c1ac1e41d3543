/**
 * What `imp run` shows a person: the command's own output passed through, one line per boot step
 * that matters, and a ticking line while the image builds.
 */
import type { OutputEvent, VmmKind } from "../../agent/index.ts";

/** The command's own bytes, passed through as `docker run` does (the user asked for this output). */
export class OutputSink {
  readonly #writes: Promise<void>[] = [];
  write(event: OutputEvent): void {
    const out = event.stream === "stdout" ? process.stdout : process.stderr;
    this.#writes.push(new Promise((resolve) => out.write(Buffer.from(event.data, "base64"), () => resolve())));
  }
  async flushed(): Promise<void> {
    await Promise.all(this.#writes);
  }
}

/** What imp run tells a person while the boot's steps run. */
export class BootProgress {
  readonly #say: (line: string) => void;
  readonly #vm: { readonly vmm: VmmKind; readonly accel: string; readonly vcpus: number; readonly memoryMiB: number };
  #bootStarted = 0;

  constructor(say: (line: string) => void, vm: { readonly vmm: VmmKind; readonly accel: string; readonly vcpus: number; readonly memoryMiB: number }) {
    this.#say = say;
    this.#vm = vm;
  }

  step(name: string, event: "begin" | "end"): void {
    if (name === "vmm" && event === "begin") {
      const v = this.#vm;
      this.#say(`booting ${v.vmm === "qemu" ? `QEMU (${v.accel})` : "Firecracker"}: ${v.vcpus} vCPU, ${v.memoryMiB} MiB`);
    }
    if (name === "vmm" && event === "end") this.#bootStarted = performance.now();
    if (name === "guest" && event === "end") this.#say(`guest ready in ${((performance.now() - this.#bootStarted) / 1000).toFixed(1)} s`);
  }
}

/** Shows `what` with the seconds elapsed while `work` runs: a ticking line on a terminal, one line otherwise. */
export async function withTicker<T>(show: boolean, what: string, work: () => Promise<T>): Promise<T> {
  if (!show) return work();
  const started = performance.now();
  const tty = process.stderr.isTTY === true;
  const line = (): string => `${what}… ${((performance.now() - started) / 1000).toFixed(0)} s`;
  if (!tty) process.stderr.write(`${what}…\n`);
  const timer = tty ? setInterval(() => process.stderr.write(`\r${line()}`), 500) : undefined;
  try {
    return await work();
  } finally {
    clearInterval(timer);
    if (tty) process.stderr.write(`\r${line()}\n`);
  }
}
