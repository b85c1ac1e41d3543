import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { duplexPair, type Duplex } from "node:stream";
import { FakeClock, ImpError } from "../../shared/index.ts";
import { GuestClient } from "./client.ts";
import { encodeFrame, FrameDecoder } from "./frame.ts";
import type { GuestEvent } from "./messages.ts";

type Req = Record<string, unknown> & { type: string; id: number };

/** The guest end of a duplex pair: records requests and answers with a scripted handler. */
class FakeGuest {
  readonly requests: Req[] = [];
  readonly #end: Duplex;
  readonly #decoder = new FrameDecoder();

  constructor(end: Duplex, answer: (req: Req, guest: FakeGuest) => void) {
    this.#end = end;
    end.on("data", (chunk: Buffer) => {
      for (const body of this.#decoder.push(chunk)) {
        const req = JSON.parse(body.toString("utf8")) as Req;
        this.requests.push(req);
        answer(req, this);
      }
    });
  }

  send(message: object): void {
    this.#end.write(encodeFrame(message));
  }

  sendRaw(bytes: Buffer): void {
    this.#end.write(bytes);
  }

  end(): void {
    this.#end.end();
  }
}

function connect(answer: (req: Req, guest: FakeGuest) => void, clock?: FakeClock): { client: GuestClient; guest: FakeGuest } {
  const [hostEnd, guestEnd] = duplexPair();
  const guest = new FakeGuest(guestEnd, answer);
  const client = new GuestClient(hostEnd, { clientName: "test", ...(clock === undefined ? {} : { clock }) });
  return { client, guest };
}

const reply = (req: Req, fields: object = {}): object => ({ v: 1, type: req.type, id: req.id, ...fields });
const isCode = (code: string) => (err: unknown): boolean => err instanceof ImpError && err.code === code;

describe("GuestClient", () => {
  it("hello() sends the envelope and returns the validated reply", async () => {
    const { client, guest } = connect((req, g) => g.send(reply(req, { versions: [1], agent: "imp-guest/0.1.0", capabilities: ["exec"] })));
    const hello = await client.hello();
    assert.equal(hello.agent, "imp-guest/0.1.0");
    assert.deepEqual(guest.requests[0], { v: 1, type: "hello", id: 1, versions: [1], client: "test" });
    client.close();
  });

  it("matches replies to requests by id when they arrive out of order", async () => {
    const held: Req[] = [];
    const { client } = connect((req, g) => {
      held.push(req);
      if (held.length === 2) {
        for (const r of held.reverse()) g.send(reply(r, { execId: r.execId, state: "exited", exitCode: r.execId === "a" ? 1 : 2 }));
      }
    });
    const [a, b] = await Promise.all([client.execStatus("a"), client.execStatus("b")]);
    assert.equal(a.exitCode, 1);
    assert.equal(b.exitCode, 2);
    client.close();
  });

  it("exec() and configure() encode their fields; env passes through untouched", async () => {
    const { client, guest } = connect((req, g) =>
      g.send(req.type === "exec" ? reply(req, { execId: req.execId, state: "running", started: true, pid: 5 }) : reply(req)),
    );
    const started = await client.exec({ execId: "vm-1", argv: ["/bin/run"], env: { SECRET: "s3cret" }, uid: 1000, gid: 1000 });
    assert.equal(started.started, true);
    await client.configure({ hostname: "h", network: { interface: "eth0", address: "10.0.0.2/30" }, entropySeed: new Uint8Array(16) });
    assert.deepEqual(guest.requests[0], { v: 1, type: "exec", id: 1, execId: "vm-1", argv: ["/bin/run"], env: { SECRET: "s3cret" }, uid: 1000, gid: 1000 });
    assert.deepEqual(guest.requests[1], {
      v: 1, type: "configure", id: 2, hostname: "h",
      network: { dns: [], interface: "eth0", address: "10.0.0.2/30" },
      entropySeed: "AAAAAAAAAAAAAAAAAAAAAA==",
    });
    client.close();
  });

  it("maps a guest error reply to a PascalCase code (not_found → GuestExecNotFound, terminal)", async () => {
    const { client } = connect((req, g) => g.send({ v: 1, type: "error", id: req.id, code: "not_found", message: "no exec" }));
    await assert.rejects(client.execStatus("zzz"), (err: unknown) => isCode("GuestExecNotFound")(err) && (err as ImpError).errorClass === "terminal");
    client.close();
  });

  it("keeps the retryable guest codes retryable and turns an unknown one into a terminal GuestError", async () => {
    const answers: Record<string, string> = { a: "configure_failed", b: "internal", c: "made_up" };
    const { client } = connect((req, g) => g.send({ v: 1, type: "error", id: req.id, code: answers[String(req["execId"])] ?? "internal", message: "x" }));
    const expect = (code: string, errorClass: string, wire: string) => (err: unknown): boolean =>
      isCode(code)(err) && (err as ImpError).errorClass === errorClass && (err as ImpError).context["guestCode"] === wire;
    await assert.rejects(client.execStatus("a"), expect("GuestConfigureFailed", "retryable", "configure_failed"));
    await assert.rejects(client.execStatus("b"), expect("GuestInternalError", "retryable", "internal"));
    await assert.rejects(client.execStatus("c"), expect("GuestError", "terminal", "made_up"));
    client.close();
  });

  it("delivers output and exit events to listeners and async iterators", async () => {
    const { client, guest } = connect(() => undefined);
    const iterator = client.events();
    const exits: GuestEvent[] = [];
    client.on("exit", (e) => exits.push(e));
    guest.send({ v: 1, type: "output", id: 0, execId: "a", stream: "stdout", seq: 0, data: "aGkK" });
    guest.send({ v: 1, type: "exit", id: 0, execId: "a", exitCode: 0 });
    const first = await iterator.next();
    const second = await iterator.next();
    assert.equal(first.value?.type, "output");
    assert.equal(second.value?.type, "exit");
    assert.equal(exits.length, 1);
    guest.end();
    assert.equal((await iterator.next()).done, true);
  });

  it("times out a request on the injected clock and ignores the late reply", async () => {
    const clock = new FakeClock();
    let pendingReq: Req | undefined;
    const { client, guest } = connect((req) => {
      pendingReq = req;
    }, clock);
    const result = client.signal("a", "SIGTERM", { timeoutMs: 1000 });
    await new Promise((r) => setImmediate(r));
    const timedOut = assert.rejects(result, isCode("GuestTimeout"));
    await clock.advance(1000);
    await timedOut;
    assert.ok(pendingReq);
    guest.send(reply(pendingReq));
    const hello = client.hello();
    await new Promise((r) => setImmediate(r));
    guest.send(reply(guest.requests[1] as Req, { versions: [1], agent: "g", capabilities: [] }));
    assert.equal((await hello).agent, "g");
    client.close();
  });

  it("aborts a request when its signal aborts", async () => {
    const { client } = connect(() => undefined);
    const controller = new AbortController();
    const result = client.shutdown("poweroff", { signal: controller.signal });
    controller.abort(new Error("stop waiting"));
    await assert.rejects(result, /stop waiting/);
    client.close();
  });

  it("rejects pending and later requests with GuestChannelClosed when the stream ends", async () => {
    const { client, guest } = connect((_req, g) => g.end());
    const closed = new Promise<Error | undefined>((resolve) => client.once("close", resolve));
    await assert.rejects(client.hello(), isCode("GuestChannelClosed"));
    assert.equal(await closed, undefined);
    await assert.rejects(client.execStatus("a"), isCode("GuestChannelClosed"));
    assert.equal(client.closed, true);
    void guest;
  });

  it("closes the stream on a malformed guest message and says why", async () => {
    const { client } = connect((req, g) => g.send(reply(req, { versions: "1", agent: "x", capabilities: [] })));
    const closed = new Promise<Error | undefined>((resolve) => client.once("close", resolve));
    await assert.rejects(client.hello(), (err: unknown) => isCode("GuestChannelClosed")(err) && isCode("GuestMessageInvalid")((err as Error).cause));
    assert.match((await closed)?.message ?? "", /versions/);
  });

  it("closes the stream when the guest declares an oversize frame", async () => {
    const { client, guest } = connect(() => undefined);
    const closed = new Promise<Error | undefined>((resolve) => client.once("close", resolve));
    const header = Buffer.alloc(4);
    header.writeUInt32BE(2 ** 31, 0);
    guest.sendRaw(header);
    assert.ok(isCode("GuestFrameTooLarge")(await closed));
  });

  it("closes the stream when a reply's type does not match its request", async () => {
    const { client } = connect((req, g) => g.send({ v: 1, type: "signal", id: req.id }));
    await assert.rejects(client.shutdown("reboot"), isCode("GuestChannelClosed"));
  });

  it("ends an events() iterator that falls too far behind", async () => {
    const { client, guest } = connect(() => undefined);
    const iterator = client.events({ maxBuffered: 2 });
    for (let seq = 0; seq < 3; seq++) guest.send({ v: 1, type: "output", id: 0, execId: "a", stream: "stdout", seq, data: "aGkK" });
    await new Promise((r) => setImmediate(r));
    await iterator.next();
    await iterator.next();
    await assert.rejects(iterator.next(), isCode("GuestEventsOverflow"));
    client.close();
  });
});

describe("GuestClient.waitForExit()", () => {
  it("returns at once when exec.status says the exec already ended", async () => {
    const { client } = connect((req, g) => g.send(reply(req, { execId: req.execId, state: "exited", exitCode: 137, signal: "SIGKILL" })));
    assert.deepEqual(await client.waitForExit("a"), { execId: "a", state: "exited", exitCode: 137, signal: "SIGKILL" });
    client.close();
  });

  it("reports a failed start from exec.status", async () => {
    const { client } = connect((req, g) => g.send(reply(req, { execId: req.execId, state: "failed", error: "no such file" })));
    assert.deepEqual(await client.waitForExit("a"), { execId: "a", state: "failed", error: "no such file" });
    client.close();
  });

  it("waits for the exit event of a running exec, ignoring other execs", async () => {
    const { client } = connect((req, g) => {
      g.send(reply(req, { execId: req.execId, state: "running", pid: 4 }));
      g.send({ v: 1, type: "exit", id: 0, execId: "other", exitCode: 1 });
      g.send({ v: 1, type: "exit", id: 0, execId: "a", exitCode: 0 });
    });
    assert.deepEqual(await client.waitForExit("a"), { execId: "a", state: "exited", exitCode: 0 });
    assert.equal(client.listenerCount("exit"), 0);
    client.close();
  });

  it("catches an exit event that arrives before the status reply", async () => {
    const { client } = connect((req, g) => {
      g.send({ v: 1, type: "exit", id: 0, execId: "a", exitCode: 5 });
      g.send(reply(req, { execId: req.execId, state: "running" }));
    });
    assert.deepEqual(await client.waitForExit("a"), { execId: "a", state: "exited", exitCode: 5 });
    client.close();
  });

  it("rejects with GuestChannelClosed when the stream closes while waiting", async () => {
    const { client } = connect((req, g) => {
      g.send(reply(req, { execId: req.execId, state: "running" }));
      setImmediate(() => g.end());
    });
    await assert.rejects(client.waitForExit("a"), isCode("GuestChannelClosed"));
  });
});
