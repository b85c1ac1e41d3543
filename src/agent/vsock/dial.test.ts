import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { ImpError, waitFor } from "../../shared/index.ts";
import { dialHybridVsock } from "./dial.ts";

/** How the fake VMM answers the Nth connection (1-based): like Firecracker / vhost-device-vsock. */
type Behaviour = "ok" | "ok-with-data" | "close" | "silent" | "garbage" | "ok-after-3s";

/** Every fake VMM and connection, closed after the suite even when a test failed half-way (else the file never ends). */
const servers = new Set<Server>();
const connections = new Set<Socket>();

/** A hybrid-vsock Unix socket whose "guest" echoes after OK; records the CONNECT lines it got. */
async function fakeVmm(path: string, behaviour: (n: number) => Behaviour): Promise<{ server: Server; lines: string[] }> {
  const lines: string[] = [];
  let n = 0;
  const server = createServer((socket: Socket) => {
    connections.add(socket);
    socket.once("close", () => connections.delete(socket));
    const mine = behaviour(++n);
    let buf = "";
    const onData = (chunk: Buffer): void => {
      buf += chunk.toString("latin1");
      const nl = buf.indexOf("\n");
      if (nl < 0) return;
      lines.push(buf.slice(0, nl));
      socket.off("data", onData);
      switch (mine) {
        case "ok":
          socket.write("OK 1073741824\n");
          socket.pipe(socket);
          break;
        case "ok-with-data":
          socket.write("OK 7\nhello from guest");
          socket.pipe(socket);
          break;
        case "close":
          socket.destroy();
          break;
        case "silent":
          break;
        case "ok-after-3s":
          setTimeout(() => socket.write("OK 9\n"), 3_000);
          break;
        case "garbage":
          socket.write("NOPE\n");
          break;
      }
    };
    socket.on("data", onData);
    socket.on("error", () => undefined);
  });
  servers.add(server);
  server.listen(path);
  await once(server, "listening");
  return { server, lines };
}

const dir = mkdtempSync(join(tmpdir(), "imp-vsock-test-"));
after(() => {
  for (const socket of connections) socket.destroy();
  for (const server of servers) server.close();
  rmSync(dir, { recursive: true, force: true });
});
let seq = 0;
const sockPath = (): string => join(dir, `vm${++seq}.vsock`);
const fast = { connectTimeoutMs: 200, ackTimeoutMs: 200, backoff: { baseMs: 10, factor: 1, capMs: 10, jitter: 0, maxAttempts: Infinity } };

async function readSome(socket: Socket): Promise<string> {
  const [chunk] = (await once(socket, "data")) as [Buffer];
  return chunk.toString();
}

describe("dialHybridVsock()", () => {
  it("returns a stream to the guest after CONNECT <port> and OK", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "ok");
    const socket = await dialHybridVsock({ udsPath: path, port: 10700, ...fast });
    socket.write("ping");
    assert.equal(await readSome(socket), "ping");
    assert.deepEqual(vmm.lines, ["CONNECT 10700"]);
    socket.destroy();
    vmm.server.close();
  });

  it("keeps guest bytes that arrive in the same read as the OK line", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "ok-with-data");
    const socket = await dialHybridVsock({ udsPath: path, port: 52, ...fast });
    assert.equal(await readSome(socket), "hello from guest");
    socket.destroy();
    vmm.server.close();
  });

  it("retries while the socket does not exist yet", async () => {
    const path = sockPath();
    const failures: string[] = [];
    const dialing = dialHybridVsock({ udsPath: path, port: 1, ...fast, onAttemptFailed: (err) => failures.push(err.code) });
    await waitFor("a failed attempt on the missing socket", async () => (failures.length >= 1 ? true : undefined), { timeoutMs: 10_000, intervalMs: 5 });
    const vmm = await fakeVmm(path, () => "ok");
    const socket = await dialing;
    assert.ok(failures.length >= 1);
    assert.ok(failures.every((code) => code === "VsockConnectFailed"), failures.join(","));
    socket.destroy();
    vmm.server.close();
  });

  it("treats a close without ack, a late ack and a garbled ack as temporary and tries again", async () => {
    const path = sockPath();
    const order: Behaviour[] = ["close", "silent", "garbage", "ok"];
    const vmm = await fakeVmm(path, (n) => order[n - 1] ?? "ok");
    const failures: string[] = [];
    const socket = await dialHybridVsock({ udsPath: path, port: 10700, ...fast, onAttemptFailed: (err) => failures.push(err.code) });
    assert.deepEqual(failures, ["VsockHandshakeFailed", "VsockHandshakeTimeout", "VsockHandshakeInvalid"]);
    assert.equal(vmm.lines.length, 4);
    socket.destroy();
    vmm.server.close();
  });

  it("by default waits for a late OK on the connection it asked on, never abandoning a CONNECT the guest may still answer", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "ok-after-3s");
    const failures: string[] = [];
    const started = performance.now();
    const socket = await dialHybridVsock({ udsPath: path, port: 10700, totalTimeoutMs: 20_000, onAttemptFailed: (err) => failures.push(err.code) });
    assert.deepEqual(failures, [], "no attempt was given up");
    assert.equal(vmm.lines.length, 1, "one CONNECT");
    assert.ok(performance.now() - started >= 2_900, "the answer came late");
    socket.destroy();
    vmm.server.close();
  });

  it("fails with a retryable VsockDialTimeout naming the last attempt's error when the guest never listens", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "close");
    await assert.rejects(dialHybridVsock({ udsPath: path, port: 10700, ...fast, totalTimeoutMs: 300 }), (err: unknown) => {
      assert.ok(err instanceof ImpError);
      assert.equal(err.code, "VsockDialTimeout");
      assert.equal(err.errorClass, "retryable");
      assert.match(err.message, /closed the connection without OK/);
      return true;
    });
    vmm.server.close();
  });

  it("stops after maxAttempts", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "close");
    await assert.rejects(
      dialHybridVsock({ udsPath: path, port: 3, ...fast, backoff: { ...fast.backoff, maxAttempts: 3 } }),
      (err: unknown) => err instanceof ImpError && err.code === "VsockDialTimeout",
    );
    assert.equal(vmm.lines.length, 3);
    vmm.server.close();
  });

  it("rejects with the signal's reason when aborted mid-attempt", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "silent");
    const controller = new AbortController();
    const dialing = dialHybridVsock({ udsPath: path, port: 3, connectTimeoutMs: 5_000, ackTimeoutMs: 5_000, signal: controller.signal });
    setTimeout(() => controller.abort(new Error("stop now")), 50);
    await assert.rejects(dialing, /stop now/);
    vmm.server.close();
  });
});
