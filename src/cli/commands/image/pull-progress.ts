/** What `imp image pull` shows while it works: a bar per layer on a terminal, a line log otherwise. */
import cliProgress from "cli-progress";
import type { PullProgress } from "../../../agent/index.ts";
import { humanBytes, shortDigest } from "./common.ts";

export interface ProgressView {
  onProgress(event: PullProgress): void;
  fetchedBytes(): number;
  stop(): void;
}

/** Bars on a terminal; one line per finished layer otherwise (logs, CI). */
export const progressView = (tty: boolean): ProgressView => (tty ? barView() : lineView());

function byteCounter(): { received: Map<string, number>; fetchedBytes: () => number } {
  const received = new Map<string, number>();
  return { received, fetchedBytes: () => [...received.values()].reduce((a, b) => a + b, 0) };
}

function lineView(): ProgressView {
  const { received, fetchedBytes } = byteCounter();
  return {
    onProgress: (e) => {
      if (e.kind === "layer-bytes") received.set(e.digest, e.received);
      if (e.kind === "layer-done") process.stderr.write(`${shortDigest(e.digest)}  pulled  ${humanBytes(e.size)}\n`);
      if (e.kind === "layer-cached") process.stderr.write(`${shortDigest(e.digest)}  already in store  ${humanBytes(e.size)}\n`);
      if (e.kind === "retry") process.stderr.write(`retrying (${e.attempt}) in ${e.delayMs} ms: ${e.error}\n`);
    },
    fetchedBytes,
    stop: () => undefined,
  };
}

function barView(): ProgressView {
  const { received, fetchedBytes } = byteCounter();
  const bars = new cliProgress.MultiBar(
    {
      format: " {name} [{bar}] {value} / {total}  {state}",
      formatValue: (v, _o, type) => (type === "value" || type === "total" ? humanBytes(v) : String(v)),
      hideCursor: true,
      clearOnComplete: false,
      barsize: 30,
      stream: process.stderr,
    },
    cliProgress.Presets.shades_classic,
  );
  const perLayer = new Map<string, cliProgress.SingleBar>();
  let stopped = false;
  const bar = (digest: string, size: number): cliProgress.SingleBar => {
    let b = perLayer.get(digest);
    if (b === undefined) {
      b = bars.create(Math.max(size, 1), 0, { name: shortDigest(digest), state: "waiting" });
      perLayer.set(digest, b);
    }
    return b;
  };
  return {
    onProgress: (e) => {
      switch (e.kind) {
        case "resolved":
          for (const l of e.layers) bar(l.digest, l.size);
          break;
        case "layer-start":
          bar(e.digest, e.size).update(0, { state: "downloading" });
          break;
        case "layer-bytes":
          received.set(e.digest, e.received);
          bar(e.digest, e.size).update(e.received, { state: "downloading" });
          break;
        case "layer-done":
          bar(e.digest, e.size).update(e.size, { state: "verified" });
          break;
        case "layer-cached":
          bar(e.digest, e.size).update(e.size, { state: "already in store" });
          break;
        case "retry":
          bars.log(`retrying (${e.attempt}) in ${e.delayMs} ms: ${e.error}\n`);
          break;
      }
    },
    fetchedBytes,
    stop: () => {
      if (!stopped) bars.stop();
      stopped = true;
    },
  };
}
