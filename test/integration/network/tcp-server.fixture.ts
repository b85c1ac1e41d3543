/**
 * A TCP server for the network isolation tests, run inside a network namespace:
 * `node tcp-server.fixture.ts NAME HOST:PORT...`. Each connection gets one line, "NAME PEER-ADDRESS",
 * so a test sees who answered and which source address arrived (NAT). Prints "ready" once listening.
 */
import { createServer } from "node:net";

const [name = "server", ...listen] = process.argv.slice(2);
let pending = listen.length;
for (const spec of listen) {
  const at = spec.lastIndexOf(":");
  const server = createServer((socket) => {
    socket.on("error", () => undefined);
    socket.end(`${name} ${socket.remoteAddress ?? "?"}\n`);
  });
  server.listen(Number(spec.slice(at + 1)), spec.slice(0, at), () => {
    if (--pending === 0) process.stdout.write("ready\n");
  });
}
