import { readFile } from "node:fs/promises";

/** The last `lines` lines of a component's log, for error messages that must stand on their own after the log is gone. */
export async function logTail(path: string, lines = 15): Promise<string> {
  try {
    const text = await readFile(path, "utf8");
    return text.trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}
