/** One connection attempt to a listening Unix socket (QEMU's serial port and monitor, a fake guest). */
import { createConnection, type Socket } from "node:net";
import { retryableError, type ImpErrorCode } from "../../shared/index.ts";

/** Resolves with the connected socket; rejects with a retryable `code` naming the path (the caller retries). */
export function connectUnix(path: string, code: ImpErrorCode, what = path): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path });
    socket.once("connect", () => {
      socket.removeAllListeners("error");
      resolve(socket);
    });
    socket.once("error", (err) => {
      socket.destroy();
      reject(retryableError(code, `Cannot connect to ${what}: ${err.message}`, { cause: err }));
    });
  });
}
