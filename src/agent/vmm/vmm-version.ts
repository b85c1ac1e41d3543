import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { terminalError } from "../../shared/index.ts";

const run = promisify(execFile);

/**
 * A VMM's `--version` first line, asked once and kept (asked again only after a failure): part of a
 * memory snapshot's key, so snapshots taken by one VMM version are never loaded by another.
 */
export function vmmVersion(name: string, binary: string): () => Promise<string> {
  let asked: Promise<string> | undefined;
  return () => {
    asked ??= run(binary, ["--version"], { timeout: 10_000 }).then(
      ({ stdout }) => stdout.split("\n")[0]?.trim() ?? "?",
      (err: unknown) => {
        asked = undefined;
        throw terminalError("SnapshotUnsupported", `Cannot ask ${name} its version: ${(err as Error).message}`, { cause: err });
      },
    );
    return asked;
  };
}
