import { open } from "node:fs/promises";

/**
 * The last lines of a log file, for error messages: what Firecracker said before it died. Reads at
 * most `maxBytes` from the end; never throws (a missing file is an empty tail).
 */
export async function fileTail(path: string, options: { readonly maxBytes?: number; readonly lines?: number } = {}): Promise<string> {
  const maxBytes = options.maxBytes ?? 4096;
  try {
    const handle = await open(path, "r");
    try {
      const { size } = await handle.stat();
      const length = Math.min(size, maxBytes);
      const buffer = Buffer.alloc(length);
      await handle.read(buffer, 0, length, size - length);
      const lines = buffer.toString("utf8").split("\n").map((l) => l.trim()).filter((l) => l !== "");
      return lines.slice(-(options.lines ?? 3)).join(" | ");
    } finally {
      await handle.close();
    }
  } catch {
    return "";
  }
}
