import { inspect } from "node:util";

/**
 * The one-time runner setup GitHub returns from generate-jitconfig. Whoever holds it can register
 * a runner and receive a job (with its secrets), so it must never reach a log, an error, a status
 * or a file. The value lives in a private field; every way of turning the object into text prints
 * "[redacted]", and the only way out is an explicit `reveal()` at the one place that hands it on.
 */
export class RunnerJitConfig {
  readonly #encoded: string;

  constructor(encoded: string) {
    if (encoded.length === 0) throw new TypeError("an encoded jitconfig cannot be empty");
    this.#encoded = encoded;
  }

  /** The encoded setup, for the single call that delivers it to the runner. */
  reveal(): string {
    return this.#encoded;
  }

  toString(): string {
    return "[redacted]";
  }

  toJSON(): string {
    return "[redacted]";
  }

  [inspect.custom](): string {
    return "RunnerJitConfig [redacted]";
  }

  get [Symbol.toStringTag](): string {
    return "RunnerJitConfig";
  }
}
