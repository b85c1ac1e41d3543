import { inspect } from "node:util";

/**
 * A credential from GitHub that is not a runner setup (a registration token, the Actions service's
 * admin token, a message queue token): like RunnerJitConfig, every way of printing it says
 * "[redacted]" and `reveal()` is the only way to the value, at the one call that sends it.
 */
export class CredentialText {
  readonly #value: string;
  readonly #what: string;

  constructor(value: string, what: string) {
    if (value.length === 0) throw new TypeError(`${what} cannot be empty`);
    this.#value = value;
    this.#what = what;
  }

  reveal(): string {
    return this.#value;
  }

  toString(): string {
    return "[redacted]";
  }

  toJSON(): string {
    return "[redacted]";
  }

  [inspect.custom](): string {
    return `${this.#what} [redacted]`;
  }
}
