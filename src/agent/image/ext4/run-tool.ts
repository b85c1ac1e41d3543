/**
 * Runs one of the filesystem tools (mkfs.ext4, debugfs) with a deadline, keeping a bounded tail of
 * its output for error messages. Tools are found on PATH; scripts/setup.d/55-image-build.sh installs them.
 */
import { spawn } from "node:child_process";
import { terminalError } from "../../../shared/index.ts";

export interface ToolResult {
  readonly stdout: string;
  readonly stderr: string;
}

const KEEP_BYTES = 64 * 1024;

/** Runs `command args`; rejects with code `ToolFailed` on a non-zero exit, a signal, or the timeout. */
export async function runTool(command: string, args: readonly string[], options: { readonly timeoutMs: number; readonly signal?: AbortSignal; readonly env?: NodeJS.ProcessEnv }): Promise<ToolResult> {
  const signal = options.signal === undefined ? AbortSignal.timeout(options.timeoutMs) : AbortSignal.any([options.signal, AbortSignal.timeout(options.timeoutMs)]);
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], signal, killSignal: "SIGKILL", ...(options.env === undefined ? {} : { env: options.env }) });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout = (stdout + chunk.toString()).slice(-KEEP_BYTES)));
    child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-KEEP_BYTES)));
    child.on("error", (err) => reject(terminalError("ToolFailed", `Cannot run ${command}: ${err.message}`, { cause: err, context: { command } })));
    child.on("close", (code, sig) => {
      if (code === 0) resolve({ stdout, stderr });
      else reject(terminalError("ToolFailed", `Cannot run ${command}: it exited with ${code ?? sig}: ${stderr.trim().slice(-2000)}`, { context: { command } }));
    });
  });
}
