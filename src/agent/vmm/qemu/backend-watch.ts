/**
 * Watches vhost-device-vsock's log for the one line that means the VM's guest channel is gone for
 * good: a panicked vring worker thread. The backend process lives on and keeps accepting host
 * connections, but nothing answers them any more (docs/boot-kit.md says how 0.3.0 gets there), so
 * without this a booting VM would wait out its whole boot timeout in silence.
 */
import { open } from "node:fs/promises";

/** How often the log is looked at while the guest has not answered yet. */
const POLL_MS = 500;
/** The most read per look: the backend logs little; a panic's first line is what matters. */
const CHUNK_BYTES = 64 * 1024;

export interface BackendWatch {
  stop(): void;
}

/** Calls `onPanic` once with the panic's line when the backend's log at `path` shows one; `stop()` ends the watch. */
export function watchBackendLog(path: string, onPanic: (line: string) => void): BackendWatch {
  let offset = 0;
  let carry = "";
  let stopped = false;
  let busy = false;
  const look = async (): Promise<void> => {
    if (busy || stopped) return;
    busy = true;
    try {
      const file = await open(path, "r").catch(() => undefined);
      if (file === undefined) return;
      try {
        // A log emptied or replaced under the watch is read again from its start.
        if ((await file.stat()).size < offset) {
          offset = 0;
          carry = "";
        }
        const { bytesRead, buffer } = await file.read(Buffer.alloc(CHUNK_BYTES), 0, CHUNK_BYTES, offset);
        offset += bytesRead;
        const text = carry + buffer.subarray(0, bytesRead).toString("utf8");
        const lines = text.split("\n");
        carry = (lines.pop() ?? "").slice(-1024);
        const panic = lines.find((l) => l.includes("panicked"));
        if (panic !== undefined && !stopped) {
          stopped = true;
          clearInterval(timer);
          onPanic(panic.trim().slice(0, 1000));
        }
      } finally {
        await file.close();
      }
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void look(), POLL_MS);
  timer.unref();
  return {
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}
