import { spawn } from "node:child_process";
import { retryableError, terminalError } from "../../shared/index.ts";

export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunOptions {
  /** Written to the command's stdin (an nft ruleset). */
  readonly input?: string;
  /** Return a non-zero exit instead of throwing (for probes and "already gone" deletes). */
  readonly allowFailure?: boolean;
}

/** Runs the node's network tools (`ip`, `bridge`, `nft`, `sysctl`), each bounded by a timeout. */
export interface NetCommandRunner {
  readonly netns: string | undefined;
  run(argv: readonly string[], options?: RunOptions): Promise<CommandResult>;
}

const MAX_OUTPUT = 1 << 20;

/**
 * A runner that executes commands directly, or inside the named network namespace through
 * `ip netns exec` (which execs the command in place, so the timeout's SIGKILL reaches it).
 */
export function commandRunner(options: { readonly netns?: string; readonly timeoutMs: number }): NetCommandRunner {
  const prefix = options.netns === undefined ? [] : ["ip", "netns", "exec", options.netns];
  return {
    netns: options.netns,
    run: (argv, runOptions = {}) => runBounded([...prefix, ...argv], options.timeoutMs, runOptions),
  };
}

function runBounded(argv: readonly string[], timeoutMs: number, options: RunOptions): Promise<CommandResult> {
  const [command = "", ...args] = argv;
  const shown = argv.join(" ");
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, LC_ALL: "C" } });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    const collect = (into: Buffer[]) => (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= MAX_OUTPUT) into.push(chunk);
    };
    child.stdout.on("data", collect(out));
    child.stderr.on("data", collect(err));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.once("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      const missing = e.code === "ENOENT";
      reject(
        missing
          ? terminalError("NetworkToolMissing", `Cannot run ${shown}: ${command} is not installed (scripts/setup.d/47-network.sh installs nftables and iproute2)`, { cause: e })
          : retryableError("NetworkCommandFailed", `Cannot run ${shown}: ${e.message}`, { cause: e }),
      );
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      const result = { code: code ?? -1, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") };
      if (timedOut) {
        reject(retryableError("NetworkCommandTimeout", `Cannot run ${shown}: no result within ${timeoutMs} ms`, { context: { command: shown } }));
      } else if (code === 0 || options.allowFailure === true) {
        resolve(result);
      } else {
        const why = result.stderr.trim().split("\n").slice(-3).join(" | ") || (signal === null ? `exit status ${code}` : `signal ${signal}`);
        reject(retryableError("NetworkCommandFailed", `Cannot run ${shown}: ${why}`, { context: { command: shown, exitCode: code ?? -1 } }));
      }
    });
    // A command that exits without reading its stdin must not crash us with EPIPE.
    child.stdin.on("error", () => undefined);
    child.stdin.end(options.input ?? "");
  });
}
