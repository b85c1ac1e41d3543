// Cross-language contract test: the TypeScript GuestClient against the real Go guest agent
// binary, run as an ordinary process (--mode=process) serving a Unix socket. No VM needed.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createConnection, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { once } from "node:events";
import { waitFor } from "../../../src/shared/index.ts";
import { FrameDecoder, parseGuestFrame, type GuestEvent } from "../../../src/agent/guest/index.ts";
import { GuestClient, type ExitEvent } from "../../../src/agent/index.ts";

const root = resolve(import.meta.dirname, "../../..");
const SENTINEL = "imp-secret-sentinel-4f0c2b9a71";

/** Builds (or finds, on a cache hit) the agent with the same setup step the project uses. */
function guestBinary(): string {
  if (process.env.IMP_GUEST_BIN !== undefined) return process.env.IMP_GUEST_BIN;
  const out = execFileSync("bash", [join(root, "scripts/setup.d/30-guest.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  return out.trim().split("\n").at(-1) ?? "";
}

let agent: ChildProcess;
let dir: string;
let socketPath: string;
let agentLog = "";

async function connect(): Promise<{ client: GuestClient; socket: Socket }> {
  const socket = createConnection(socketPath);
  await once(socket, "connect");
  return { client: new GuestClient(socket, { clientName: "go-agent.test", requestTimeoutMs: 20_000 }), socket };
}

function exitOf(client: GuestClient, execId: string): Promise<ExitEvent> {
  return new Promise((resolveExit) => {
    const onExit = (e: ExitEvent): void => {
      if (e.execId !== execId) return;
      client.off("exit", onExit);
      resolveExit(e);
    };
    client.on("exit", onExit);
  });
}

function collectOutput(client: GuestClient, execId: string): { stdout: Buffer[]; seqs: number[] } {
  const collected = { stdout: [] as Buffer[], seqs: [] as number[] };
  client.on("output", (e) => {
    if (e.execId !== execId || e.stream !== "stdout") return;
    collected.stdout.push(Buffer.from(e.data, "base64"));
    collected.seqs.push(e.seq);
  });
  return collected;
}

describe("GuestClient against the real Go agent", () => {
  before(async () => {
    const bin = guestBinary();
    assert.ok(existsSync(bin), `guest agent binary missing at ${bin}`);
    dir = mkdtempSync(join(tmpdir(), "imp-guest-it-"));
    socketPath = join(dir, "agent.sock");
    agent = spawn(bin, ["--mode=process", "--listen-unix", socketPath, "--log-level", "debug"], { stdio: ["ignore", "ignore", "pipe"] });
    agent.stderr?.on("data", (chunk: Buffer) => (agentLog += chunk.toString("utf8")));
    await waitFor("the guest agent socket", () => (existsSync(socketPath) ? true : undefined), { timeoutMs: 20_000, intervalMs: 50 });
  });

  after(() => {
    if (agent.exitCode === null) agent.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  it("hello() negotiates version 1", async () => {
    const { client } = await connect();
    const hello = await client.hello();
    assert.deepEqual(hello.versions, [1]);
    assert.match(hello.agent, /^imp-guest\//);
    assert.ok(hello.capabilities.includes("exec"));
    client.close();
  });

  it("configure() is accepted (validated and recorded in process mode)", async () => {
    const { client } = await connect();
    await client.configure({
      hostname: "runner-1",
      network: { interface: "eth0", address: "172.31.0.2/30", gateway: "172.31.0.1", dns: ["172.31.0.1"] },
      entropySeed: new Uint8Array(32).fill(7),
    });
    await assert.rejects(client.configure({ hostname: "-bad-" }), (err: unknown) => (err as { code?: string }).code === "GuestRequestInvalid");
    client.close();
  });

  it("exec() runs with the given env, streams output, reports exit, and never logs the env", async () => {
    const { client } = await connect();
    const output = collectOutput(client, "it-env");
    const exited = exitOf(client, "it-env");
    const reply = await client.exec({
      execId: "it-env",
      argv: ["sh", "-c", 'printf "len=%s cwd=%s" "${#SECRET}" "$(pwd)"; exit 3'],
      env: { SECRET: SENTINEL, PATH: "/usr/bin:/bin" },
      cwd: "/tmp",
    });
    assert.equal(reply.started, true);
    assert.equal(reply.state, "running");
    const exit = await exited;
    assert.equal(exit.exitCode, 3);
    assert.equal(Buffer.concat(output.stdout).toString(), `len=${SENTINEL.length} cwd=/tmp`);
    const status = await client.execStatus("it-env");
    assert.equal(status.state, "exited");
    assert.equal(status.exitCode, 3);
    assert.ok(agentLog.includes("envKeys=2"), "the agent logs the number of env keys");
    assert.ok(!agentLog.includes(SENTINEL), "the env value must never reach the agent's log");
    client.close();
  });

  it("exec() with a known id after a reconnect returns the first exec's state and starts nothing", async () => {
    const first = await connect();
    const exited = exitOf(first.client, "it-once");
    const req = { execId: "it-once", argv: ["/bin/sh", "-c", "echo run"], env: {} };
    assert.equal((await first.client.exec(req)).started, true);
    await exited;
    first.client.close();
    const second = await connect();
    const again = await second.client.exec({ ...req, argv: ["/bin/sh", "-c", "echo other"] });
    assert.equal(again.started, false);
    assert.equal(again.state, "exited");
    assert.equal(again.exitCode, 0);
    assert.equal((await second.client.execStatus("it-once")).state, "exited");
    assert.deepEqual(await second.client.waitForExit("it-once"), { execId: "it-once", state: "exited", exitCode: 0 });
    second.client.close();
  });

  it("streams large output in validated chunks with gapless sequence numbers", async () => {
    const { client } = await connect();
    const output = collectOutput(client, "it-big");
    const exited = exitOf(client, "it-big");
    await client.exec({ execId: "it-big", argv: ["/bin/sh", "-c", "head -c 200000 /dev/zero | tr '\\0' z"], env: {} });
    await exited;
    const all = Buffer.concat(output.stdout);
    assert.equal(all.length, 200_000);
    assert.ok(output.stdout.every((c) => c.length <= 32 * 1024));
    assert.deepEqual(output.seqs, output.seqs.map((_, i) => i));
    client.close();
  });

  it("signal() reaches the exec and the exit event names the signal", async () => {
    const { client } = await connect();
    const events = client.events();
    await client.exec({ execId: "it-sig", argv: ["/bin/sleep", "60"], env: {} });
    const waited = client.waitForExit("it-sig", { signal: AbortSignal.timeout(20_000) });
    await client.signal("it-sig", "SIGTERM");
    assert.deepEqual(await waited, { execId: "it-sig", state: "exited", exitCode: 143, signal: "SIGTERM" });
    let exit: GuestEvent | undefined;
    for await (const e of events) {
      if (e.type === "exit" && e.execId === "it-sig") {
        exit = e;
        break;
      }
    }
    assert.equal(exit?.type === "exit" && exit.signal, "SIGTERM");
    await client.signal("it-sig", "SIGKILL"); // a no-op after exit, not an error
    await assert.rejects(client.execStatus("never-started"), (err: unknown) => (err as { code?: string }).code === "GuestExecNotFound");
    client.close();
  });

  it("answers malformed frames with schema-valid error frames and keeps serving other streams", async () => {
    const raw = createConnection(socketPath);
    await once(raw, "connect");
    const decoder = new FrameDecoder();
    const messages: unknown[] = [];
    raw.on("data", (chunk: Buffer) => messages.push(...decoder.push(chunk).map(parseGuestFrame)));
    const bodies = ["nope", '{"v":1,"type":"launch","id":4}', '{"v":7,"type":"hello","id":5,"versions":[7]}'];
    for (const body of bodies) {
      const b = Buffer.from(body);
      const header = Buffer.alloc(4);
      header.writeUInt32BE(b.length, 0);
      raw.write(Buffer.concat([header, b]));
    }
    await waitFor("three error frames", () => (messages.length >= 3 ? true : undefined), { timeoutMs: 10_000, intervalMs: 20 });
    assert.deepEqual(
      messages.map((m) => [(m as { id: number }).id, (m as { code: string }).code]),
      [[0, "bad_json"], [4, "unknown_type"], [5, "unsupported_version"]],
    );
    const oversize = Buffer.alloc(4);
    oversize.writeUInt32BE(1024 * 1024 + 1, 0);
    raw.write(oversize);
    await once(raw, "close");
    assert.equal((messages.at(-1) as { code: string }).code, "frame_too_large");
    const { client } = await connect();
    assert.deepEqual((await client.hello()).versions, [1]);
    client.close();
  });

  it("an exec with shutdownAfterExit ends the agent after its exit event (in a second agent)", async () => {
    const second = spawn(guestBinary(), ["--mode=process", "--listen-unix", join(dir, "second.sock")], { stdio: "ignore" });
    try {
      await waitFor("the second agent socket", () => (existsSync(join(dir, "second.sock")) ? true : undefined), { timeoutMs: 20_000, intervalMs: 50 });
      const socket = createConnection(join(dir, "second.sock"));
      await once(socket, "connect");
      const client = new GuestClient(socket, { requestTimeoutMs: 20_000 });
      const exited = once(second, "exit");
      const exitEvent = exitOf(client, "last");
      await client.exec({ execId: "last", argv: ["/bin/sh", "-c", "exit 9"], env: {}, shutdownAfterExit: "poweroff" });
      assert.equal((await exitEvent).exitCode, 9);
      const [code] = await exited;
      assert.equal(code, 0);
    } finally {
      if (second.exitCode === null) second.kill("SIGKILL");
    }
  });

  it("shutdown() is acknowledged before the agent exits", async () => {
    const { client } = await connect();
    const exited = once(agent, "exit");
    await client.shutdown("poweroff");
    const [code] = await exited;
    assert.equal(code, 0);
    assert.ok(!agentLog.includes(SENTINEL));
  });
});
