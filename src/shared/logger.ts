import { pino, type Logger } from "pino";

export type { Logger } from "pino";

/**
 * Paths that must never reach a log line, whatever code logs them: workload environments carry the
 * one-time runner setup. Redaction is a second line of defence; code must not log them at all.
 */
export const REDACTED_PATHS = [
  "env",
  "*.env",
  "*.*.env",
  "jitConfig",
  "*.jitConfig",
  "encodedJitConfig",
  "*.encodedJitConfig",
  "token",
  "*.token",
  "password",
  "*.password",
  "authorization",
  "*.authorization",
  "privateKey",
  "*.privateKey",
];

export interface LoggerOptions {
  readonly level?: string;
  readonly name?: string;
  /** Where lines go; defaults to stderr so stdout stays for command output. */
  readonly destination?: NodeJS.WritableStream;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      level: options.level ?? "info",
      ...(options.name === undefined ? {} : { name: options.name }),
      redact: { paths: REDACTED_PATHS, censor: "[redacted]" },
    },
    options.destination ?? process.stderr,
  );
}

/** A logger that discards everything, for tests and library defaults. */
export const silentLogger: Logger = pino({ level: "silent" });
