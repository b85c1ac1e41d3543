import { terminalError } from "../../shared/index.ts";

/**
 * The host half of Firecracker's hybrid-vsock handshake, as pure functions. The host connects to the
 * VM's Unix socket and writes `CONNECT <port>\n`; the VMM (Firecracker, or rust-vmm's
 * vhost-device-vsock under QEMU) forwards the connection to the guest's vsock port and answers
 * `OK <host port>\n` once the guest accepted it. If nothing listens in the guest the VMM closes the
 * Unix connection without an answer. See docs/boot-kit.md.
 */

/** Longest acknowledgement line accepted: "OK " + a u32 + "\n" fits with room to spare. */
export const MAX_ACK_LINE_BYTES = 32;

/** The request line for guest vsock `port` (a u32). */
export function connectLine(port: number): Buffer {
  if (!Number.isInteger(port) || port < 0 || port > 0xffff_ffff) {
    throw terminalError("VsockPortInvalid", `Cannot build vsock CONNECT line: port ${port} is not an integer in 0..4294967295`);
  }
  return Buffer.from(`CONNECT ${port}\n`, "ascii");
}

/** What the bytes read so far say about the acknowledgement. */
export type AckParse =
  | { readonly kind: "incomplete" }
  /** `rest` are bytes after the ack line: the first bytes of the guest's stream. */
  | { readonly kind: "ok"; readonly hostPort: number; readonly rest: Buffer }
  | { readonly kind: "bad"; readonly reason: string };

/** Parses the VMM's answer. Untrusted input: bounded, strict ASCII `OK <decimal u32>\n`. */
export function parseAck(received: Buffer): AckParse {
  const newline = received.indexOf(0x0a);
  if (newline < 0) {
    return received.length >= MAX_ACK_LINE_BYTES
      ? { kind: "bad", reason: `no newline in the first ${MAX_ACK_LINE_BYTES} bytes` }
      : { kind: "incomplete" };
  }
  if (newline >= MAX_ACK_LINE_BYTES) return { kind: "bad", reason: `ack line longer than ${MAX_ACK_LINE_BYTES} bytes` };
  const line = received.subarray(0, newline).toString("latin1");
  const match = /^OK ([0-9]{1,10})$/.exec(line);
  const hostPort = match?.[1] === undefined ? Number.NaN : Number(match[1]);
  if (!Number.isInteger(hostPort) || hostPort > 0xffff_ffff) {
    return { kind: "bad", reason: `unexpected ack ${JSON.stringify(line)}` };
  }
  return { kind: "ok", hostPort, rest: received.subarray(newline + 1) };
}
