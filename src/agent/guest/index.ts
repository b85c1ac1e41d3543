export { GuestClient, type ExecOutcome, type GuestClientEvents, type GuestClientOptions, type RequestOptions } from "./client.ts";
export { encodeFrame, FrameDecoder, MAX_FRAME_BYTES, parseGuestFrame } from "./frame.ts";
export * from "./messages.ts";
export { EXIT_RECORD_KEY_BYTES, EXIT_RECORD_PREFIX, exitRecordLine, firstExitRecord, newExitRecordKey, verifyExitRecord, type WorkloadExitRecord } from "./exit-record.ts";
/** The guest agent's vsock port (docs/guest-protocol.md). */
export const GUEST_VSOCK_PORT = 10700;
/** Name of the virtio-serial port the guest agent serves. */
export const GUEST_SERIAL_PORT_NAME = "imp.agent";
