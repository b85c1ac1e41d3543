export { connectLine, MAX_ACK_LINE_BYTES, parseAck, type AckParse } from "./handshake.ts";
export { defaultDialConfig, dialHybridVsock, VSOCK_DIAL_BACKOFF, type HybridVsockDialOptions } from "./dial.ts";
