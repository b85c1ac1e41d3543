import { retryableError, terminalError, type ImpError } from "../../../shared/index.ts";
import type { FirecrackerRequest } from "./api-requests.ts";

/**
 * Firecracker answers a refused request with a status and a `fault_message`; this turns them into one
 * classified error. The split is by what retrying can change: a 400 is a statement about our input or
 * this host (missing file, no KVM), so it is terminal, except for the few host conditions that pass
 * (a tap still held by a VMM that is going away, memory or descriptors short for a moment).
 */

/** `Error creating KVM object: <errno text>` is how Firecracker reports that /dev/kvm cannot be opened. */
const KVM_UNAVAILABLE = /Error creating KVM object|\/dev\/kvm/i;

/** Host conditions that can clear on their own; errno texts as Rust's io::Error prints them. */
const TRANSIENT_HOST = /Resource busy|os error 16\b|Cannot allocate memory|os error 12\b|Resource temporarily unavailable|os error 11\b|Too many open files|os error 24\b/;

/** Pure: the classified error for a non-success answer to `request`. */
export function faultError(request: FirecrackerRequest, status: number, faultMessage: string | undefined, vm: string): ImpError {
  const fault = (faultMessage ?? "").trim();
  const what = `${request.method} ${request.path}`;
  const context = { vm, request: what, status, ...(fault === "" ? {} : { faultMessage: fault }) };
  if ((request.path === "/actions" || request.path === "/snapshot/load") && KVM_UNAVAILABLE.test(fault)) {
    return terminalError("KvmUnavailable", `Cannot start VM ${vm}: this host offers no usable KVM (Firecracker: ${fault})`, { context });
  }
  const message = `Cannot ${what} for VM ${vm}: Firecracker answered ${status}${fault === "" ? "" : `: ${fault}`}`;
  if (status >= 500 || TRANSIENT_HOST.test(fault)) return retryableError("FirecrackerApiError", message, { context });
  return terminalError("FirecrackerApiError", message, { context });
}

/** Pulls `fault_message` out of an error body; Firecracker's bodies are small JSON objects. */
export function parseFaultMessage(body: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(body);
    if (typeof parsed === "object" && parsed !== null && "fault_message" in parsed) {
      const message = (parsed as { fault_message: unknown }).fault_message;
      if (typeof message === "string") return message;
    }
  } catch {
    // not JSON: fall through to the raw text
  }
  const text = body.trim();
  return text === "" ? undefined : text.slice(0, 1_000);
}
