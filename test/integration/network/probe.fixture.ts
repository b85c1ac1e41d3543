/**
 * Tries TCP connections concurrently from inside a network namespace:
 * `node probe.fixture.ts TIMEOUT_MS HOST:PORT[@LOCAL_ADDRESS]...`. Prints one JSON line per target:
 * {"target", "ok": true, "reply"} when a connection was made and the server's line read, else
 * {"target", "ok": false, "error"} ("timeout" or the socket error's code).
 */
import { connect } from "node:net";

const [timeoutText = "2000", ...targets] = process.argv.slice(2);
const timeoutMs = Number(timeoutText);

function probe(target: string): Promise<Record<string, unknown>> {
  const [hostPort = "", localAddress] = target.split("@");
  const at = hostPort.lastIndexOf(":");
  return new Promise((resolve) => {
    const socket = connect({ host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)), ...(localAddress === undefined ? {} : { localAddress }) });
    let reply = "";
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ target, ok: false, error: "timeout" });
    }, timeoutMs);
    socket.on("data", (chunk: Buffer) => {
      reply += chunk.toString("utf8");
    });
    socket.on("end", () => {
      clearTimeout(timer);
      resolve({ target, ok: true, reply: reply.trim() });
    });
    socket.on("error", (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve({ target, ok: false, error: err.code ?? err.message });
    });
  });
}

for (const result of await Promise.all(targets.map(probe))) process.stdout.write(`${JSON.stringify(result)}\n`);
