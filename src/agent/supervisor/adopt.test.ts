/**
 * adoptSupervised() against a supervisor socket played by this test: the race a loaded machine
 * showed, where the supervisor has reaped its process (and says so in its hello) but has not yet
 * written exit.json or closed its socket.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { adoptSupervised } from "./adopt.ts";
import { bootId, readProcStat, type ProcessRef } from "./proc.ts";
import { SUPERVISOR_FILES, type SupervisorIdentity } from "./records.ts";

let dir: string;
let server: Server | undefined;

before(async () => {
  dir = await mkdtemp("/tmp/imp-adopt-");
});
after(async () => {
  server?.close();
  await rm(dir, { recursive: true, force: true });
});

async function serveHello(identity: SupervisorIdentity, state: "running" | "exited"): Promise<void> {
  const status = {
    name: identity.name, vmId: identity.vmId, state, process: identity.process, supervisor: identity.supervisor, startedAt: identity.startedAt,
    ...(state === "exited" ? { exit: { code: null, signal: "SIGKILL", at: "2026-12-05T10:01:00Z" } } : {}),
  };
  server?.close();
  server = createServer((socket) => socket.write(`${JSON.stringify({ type: "hello", status })}\n`));
  await new Promise<void>((resolve) => server?.listen(join(dir, SUPERVISOR_FILES.socket), resolve));
}

async function identity(): Promise<SupervisorIdentity> {
  const stat = await readProcStat(process.pid);
  assert.ok(stat !== undefined);
  // The test process stands in for the supervisor (alive, our start time); the supervised process is made up.
  const supervisor: ProcessRef = { pid: process.pid, startTime: stat.startTime };
  const id: SupervisorIdentity = {
    version: 1, name: "vmm", vmId: "vm-1", bootId: await bootId(), supervisor, process: { pid: 999_999, startTime: 1 },
    socket: join(dir, SUPERVISOR_FILES.socket), startedAt: "2026-12-05T10:00:00Z",
  };
  await writeFile(join(dir, SUPERVISOR_FILES.identity), JSON.stringify(id));
  return id;
}

describe("adoptSupervised()", () => {
  it("takes the exit a supervisor's hello reports, before exit.json is written: the process is not running", async () => {
    await rm(join(dir, SUPERVISOR_FILES.socket), { force: true });
    await serveHello(await identity(), "exited");
    const adopted = await adoptSupervised(dir, { timeoutMs: 5_000 });
    assert.equal(adopted.running, false);
    const exit = await adopted.exited();
    assert.equal(exit.signal, "SIGKILL");
    assert.equal(exit.recorded, true);
  });

  it("adopts a process the hello reports running", async () => {
    await rm(join(dir, SUPERVISOR_FILES.socket), { force: true });
    await serveHello(await identity(), "running");
    const adopted = await adoptSupervised(dir, { timeoutMs: 5_000 });
    assert.equal(adopted.running, true);
    adopted.detach();
  });
});
