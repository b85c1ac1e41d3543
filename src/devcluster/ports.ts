import { createServer } from "node:net";

/**
 * A free TCP port on 127.0.0.1, found by binding port 0. Another process can take it before the
 * caller binds it; callers that start servers treat a bind failure as retryable and pick again.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === "object") resolve(address.port);
        else reject(new Error("Cannot find a free port: the listener had no TCP address"));
      });
    });
  });
}
