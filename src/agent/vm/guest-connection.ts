import type { RunningVm } from "../vmm/types.ts";
import { GuestClient } from "../guest/index.ts";
import { ImpError, terminalError } from "../../shared/index.ts";

/** Over virtio-serial, the first hello waits this long for its answer, each later one twice as long as the one before, up to the cap. */
export const SERIAL_HELLO_FIRST_TRY_MS = 500;
export const SERIAL_HELLO_TRY_CAP_MS = 8_000;

/**
 * Opens a guest channel and says hello, within `timeoutMs` overall. Over virtio-serial the first
 * request can be lost while the guest has not opened its port yet, so hello is repeated until
 * answered, each try waiting twice as long as the one before (a fixed short wait never succeeds when
 * the emulated guest on a loaded machine takes longer than it to answer); over vsock the dial
 * itself retries until the guest listens. Fails at once when the VM goes down.
 */
export async function connectGuest(
  vm: RunningVm,
  options: { readonly timeoutMs: number; readonly serial: boolean; readonly signal?: AbortSignal; readonly clientName: string; readonly onAttemptFailed?: (err: ImpError, attempt: number) => void },
): Promise<GuestClient> {
  const deadline = performance.now() + options.timeoutMs;
  const signal = options.signal === undefined ? vm.downSignal : AbortSignal.any([vm.downSignal, options.signal]);
  const stream = await vm.connectGuest({ timeoutMs: options.timeoutMs, signal, ...(options.onAttemptFailed === undefined ? {} : { onAttemptFailed: options.onAttemptFailed }) });
  const client = new GuestClient(stream, { clientName: options.clientName });
  client.on("close", () => undefined);
  let tryMs = SERIAL_HELLO_FIRST_TRY_MS;
  for (;;) {
    const left = deadline - performance.now();
    try {
      await client.hello({ timeoutMs: Math.max(1, options.serial ? Math.min(tryMs, left) : left), signal });
      return client;
    } catch (err) {
      const timedOut = err instanceof ImpError && err.code === "GuestTimeout";
      if (signal.aborted || left <= 0 || client.closed || !timedOut) {
        client.close();
        if (timedOut) throw terminalError("BootTimeout", `Cannot reach the guest agent: no hello within ${options.timeoutMs} ms`, { cause: err });
        throw err;
      }
      tryMs = Math.min(tryMs * 2, SERIAL_HELLO_TRY_CAP_MS);
    }
  }
}

/** Codes that mean the guest itself misbehaved (not a slow boot or a lost channel): it is never trusted again. */
const MISBEHAVIOUR_CODES: ReadonlySet<string> = new Set(["GuestMessageInvalid", "GuestFrameTooLarge", "GuestConsoleFlood"]);

/**
 * Whether `err`, or one of its causes, says the guest broke the protocol or flooded its console. A
 * request that failed because the stream closed carries the protocol violation as its cause.
 */
export function isGuestMisbehaviour(err: unknown): boolean {
  let current: unknown = err;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    if (current instanceof ImpError && MISBEHAVIOUR_CODES.has(current.code)) return true;
    current = current instanceof Error ? current.cause : undefined;
  }
  return false;
}
