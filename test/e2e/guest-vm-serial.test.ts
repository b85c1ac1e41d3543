/**
 * End to end over the virtio-serial fallback channel (port `imp.agent`): the same guest agent must be
 * reachable and fully usable without vsock. One boot.
 */
import { after, afterEach, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { bootTestVm, failureTracker, runExec, type TestVm } from "../harness/vm.ts";

describe("a QEMU VM reached over virtio-serial", { timeout: 300_000 }, (suite) => {
  let t: TestVm;
  const failures = failureTracker();

  before(async () => {
    t = await bootTestVm({ name: "guest-vm-serial", channel: "serial" });
    suite.diagnostic(`spawn to hello ${Math.round(t.bootMs)} ms`);
  });
  afterEach(failures.record);
  after(async () => {
    await t?.dispose(!failures.any);
  });

  it("answers hello on the imp.agent port", () => {
    assert.equal(t.channel, "serial");
    assert.deepEqual(t.hello.versions, [1]);
  });

  it("runs an exec and reports its output and exit code", async () => {
    const result = await runExec(t.client, { execId: "serial-1", argv: ["/bin/sh", "-c", "echo via serial; exit 5"], env: { PATH: "/bin" } });
    assert.equal(result.stdout, "via serial\n");
    assert.equal(result.exitCode, 5);
  });

  it("keeps an exec running while the host reconnects to the port, then reports its exit code", async () => {
    const reply = await t.client.exec({
      execId: "serial-disc",
      argv: ["/bin/sh", "-c", "while [ ! -e /tmp/release ]; do sleep 0.1; done; exit 4"],
      env: { PATH: "/bin" },
    });
    assert.equal(reply.started, true);
    const fresh = await t.reconnect();
    assert.equal((await fresh.execStatus("serial-disc")).state, "running");
    assert.equal((await fresh.exec({ execId: "serial-disc", argv: ["/bin/true"], env: {} })).started, false);
    await runExec(fresh, { execId: "serial-release", argv: ["/bin/touch", "/tmp/release"], env: { PATH: "/bin" } });
    for (let i = 0; i < 300 && (await fresh.execStatus("serial-disc")).state === "running"; i++) await new Promise((r) => setTimeout(r, 100));
    const status = await fresh.execStatus("serial-disc");
    assert.deepEqual([status.state, status.exitCode], ["exited", 4]);
  });

  it("shuts down on request and QEMU exits 0", async () => {
    await t.client.shutdown("poweroff");
    const exit = await t.vm.exited();
    assert.deepEqual({ code: exit.code, signal: exit.signal }, { code: 0, signal: null });
  });
});
