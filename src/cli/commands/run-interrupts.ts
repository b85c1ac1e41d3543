/**
 * Ctrl-C and SIGTERM during `imp run`: before the command runs they abort the boot (whose cleanups
 * stop the VM); once it runs they go to the command, and a third one gives up on it.
 */
import type { SignalName } from "../../agent/index.ts";
import { terminalError } from "../../shared/index.ts";

export class Interrupts {
  readonly boot = new AbortController();
  forward: ((signal: SignalName) => void) | undefined;
  #count = 0;

  readonly handler = (signal: NodeJS.Signals): void => {
    this.#count++;
    if (this.forward !== undefined && this.#count < 3) {
      this.forward(signal === "SIGINT" ? "SIGINT" : "SIGTERM");
      return;
    }
    // Before the command runs (or a third time): give up; the boot's cleanups stop the VM.
    this.boot.abort(terminalError("RunInterrupted", `Cannot run: interrupted by ${signal}`));
  };
}
