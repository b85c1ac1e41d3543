import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { ImpError, waitFor } from "../../shared/index.ts";
import { dialHybridVsock } from "./dial.ts";

/** How the fake VMM answers the Nth connection (1-based): like Firecracker / vhost-device-vsock. */
type Behaviour = "ok" | "ok-with-data" | "close" | "silent" | "garbage" | "ok-after-1s" | "ok-after-3s";

/** What one connection saw: whether the VMM answered it, and whether the host closed it before that. */
interface ConnectionRecord {
  answered: boolean;
  closed: boolean;
  closedUnanswered: boolean;
  /** Answers a silent connection now. */
  answer: () => void;
}

/** Every fake VMM and connection, closed after the suite even when a test failed half-way (else the file never ends). */
const servers = new Set<Server>();
const connections = new Set<Socket>();

/** A hybrid-vsock Unix socket whose "guest" echoes after OK; records the CONNECT lines it got. */
async function fakeVmm(path: string, behaviour: (n: number) => Behaviour): Promise<{ server: Server; lines: string[]; records: ConnectionRecord[] }> {
  const lines: string[] = [];
  const records: ConnectionRecord[] = [];
  let n = 0;
  const server = createServer((socket: Socket) => {
    connections.add(socket);
    const record: ConnectionRecord = {
      answered: false,
      closed: false,
      closedUnanswered: false,
      answer: () => {
        record.answered = true;
        if (!socket.destroyed) socket.write("OK 5\n");
      },
    };
    records.push(record);
    const write = socket.write.bind(socket) as (chunk: string) => boolean;
    socket.write = ((chunk: string) => {
      record.answered = true;
      return write(chunk);
    }) as typeof socket.write;
    const hostClosed = (): void => {
      if (record.closed) return;
      record.closed = true;
      if (!record.answered) record.closedUnanswered = true;
    };
    // The host's FIN ('end') is the close as it happens; 'close' follows later.
    socket.once("end", hostClosed);
    socket.once("close", () => {
      connections.delete(socket);
      hostClosed();
    });
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
          record.answered = true;
          socket.destroy();
          break;
        case "silent":
          break;
        case "ok-after-1s":
          setTimeout(() => record.answer(), 1_000);
          break;
        case "ok-after-3s":
          setTimeout(() => record.answer(), 3_000);
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
  return { server, lines, records };
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

/**
 * Lets every close the host already made reach the fake VMM: the host closes its sockets
 * synchronously (the FIN is sent before the dial settles), so once a probe connection made after
 * them is accepted, the server's poll has seen their EOF too. The probe's own record is dropped.
 */
async function closesDelivered(path: string, vmm: { records: ConnectionRecord[] }): Promise<void> {
  const before = vmm.records.length;
  const probe = createConnection({ path });
  await once(probe, "connect");
  await waitFor("the probe accepted", async () => (vmm.records.length > before ? true : undefined), { timeoutMs: 10_000, intervalMs: 1 });
  await new Promise((resolve) => setImmediate(resolve));
  vmm.records.splice(before, 1);
  probe.destroy();
}

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
    const waiting: number[] = [];
    const socket = await dialHybridVsock({ udsPath: path, port: 10700, ...fast, onAttemptFailed: (err) => failures.push(err.code), onAttemptWaiting: (n) => waiting.push(n) });
    assert.deepEqual(failures, ["VsockHandshakeFailed", "VsockHandshakeInvalid"]);
    assert.deepEqual(waiting, [2], "the silent one is kept waiting while the next is asked");
    assert.equal(vmm.lines.length, 4);
    await closesDelivered(path, vmm);
    assert.equal(vmm.records[1]?.closed, false, "the unanswered CONNECT was not closed");
    socket.destroy();
    vmm.server.close();
  });

  it("asks again beside a CONNECT left unanswered, takes the first OK, and closes the other only once it is answered", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, (n) => (n === 1 ? "ok-after-1s" : "ok"));
    const socket = await dialHybridVsock({ udsPath: path, port: 10700, ...fast });
    assert.equal(vmm.lines.length, 2, "a second CONNECT beside the first");
    assert.equal(vmm.records[1]?.answered, true, "the second one won");
    await waitFor("the late-answered first connection closed by the host", async () => (vmm.records[0]?.closed === true ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
    assert.equal(vmm.records[0]?.closedUnanswered, false, "closed only after its OK");
    socket.write("ping");
    assert.equal(await readSome(socket), "ping");
    socket.destroy();
    vmm.server.close();
  });

  it("at its deadline leaves unanswered CONNECTs open and closes each once it is answered", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "silent");
    const waiting: number[] = [];
    await assert.rejects(dialHybridVsock({ udsPath: path, port: 10700, ...fast, ackTimeoutMs: 50, totalTimeoutMs: 400, onAttemptWaiting: (n) => waiting.push(n) }), (err: unknown) => {
      assert.ok(err instanceof ImpError);
      assert.equal(err.code, "VsockDialTimeout");
      assert.match(err.message, /still unanswered/);
      return true;
    });
    assert.ok(vmm.records.length >= 2, `asked more than once beside the first (${vmm.records.length})`);
    assert.ok(vmm.records.length <= 17, `a bounded number of CONNECTs wait at once (${vmm.records.length})`);
    await closesDelivered(path, vmm);
    assert.deepEqual(vmm.records.map((r) => r.closed), vmm.records.map(() => false), "none closed unanswered by the host");
    for (const record of vmm.records) record.answer();
    await waitFor("every late-answered connection closed by the host", async () => (vmm.records.every((r) => r.closed) ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
    assert.ok(vmm.records.every((r) => !r.closedUnanswered));
    vmm.server.close();
  });

  it("by default waits for a late OK on the connection it asked on, never abandoning a CONNECT the guest may still answer", async () => {
    const path = sockPath();
    const vmm = await fakeVmm(path, () => "ok-after-3s");
    const failures: string[] = [];
    const started = performance.now();
    const socket = await dialHybridVsock({ udsPath: path, port: 10700, totalTimeoutMs: 20_000, onAttemptFailed: (err) => failures.push(err.code) });
    assert.deepEqual(failures, [], "no attempt was given up");
    assert.equal(vmm.lines.length, 2, "one CONNECT, and after 2 s one more beside it");
    assert.ok(performance.now() - started >= 2_900, "the answer came late");
    await waitFor("the loser closed after its OK", async () => (vmm.records.every((r) => r.answered) && vmm.records.filter((r) => r.closed).length >= 1 ? true : undefined), { timeoutMs: 10_000, intervalMs: 10 });
    assert.ok(vmm.records.every((r) => !r.closedUnanswered));
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
