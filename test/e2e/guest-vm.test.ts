/**
 * End to end: a real QEMU microvm (TCG), Debian's cloud kernel, Imp's initramfs and the real guest
 * agent as PID 1, driven through the TypeScript guest client over vsock (vhost-device-vsock, the same
 * hybrid-vsock protocol as Firecracker) — or virtio-serial where vsock is unavailable. One boot serves
 * every assertion here; each uses its own exec ids and files, and the last one shuts the VM down.
 */
import { after, afterEach, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { GuestClient } from "../../src/agent/index.ts";
import { bootTestVm, debugfs, failureTracker, loadBootKit, runExec, sha256File, type TestVm } from "../harness/vm.ts";

const PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

/** Polls exec.status until the exec is no longer running (bounded). */
async function waitExited(client: GuestClient, execId: string, timeoutMs = 30_000): Promise<Awaited<ReturnType<GuestClient["execStatus"]>>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await client.execStatus(execId);
    if (status.state !== "running") return status;
    if (Date.now() > deadline) throw new Error(`exec ${execId} still running after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("a QEMU VM running the guest agent", { timeout: 300_000 }, (suite) => {
  let t: TestVm;
  let baseSha256: string;
  const failures = failureTracker();

  before(async () => {
    const kit = await loadBootKit();
    baseSha256 = await sha256File(kit.rootfs);
    t = await bootTestVm({ name: "guest-vm" });
    suite.diagnostic(`channel ${t.channel}, spawn to hello ${Math.round(t.bootMs)} ms`);
  });
  afterEach(failures.record);
  after(async () => {
    await t?.dispose(!failures.any);
  });

  it("answers hello with protocol version 1 and its capabilities", () => {
    assert.deepEqual(t.hello.versions, [1]);
    assert.match(t.hello.agent, /^imp-guest\//);
    for (const capability of ["exec", "exec.status", "shutdown", "output", "exit"]) {
      assert.ok(t.hello.capabilities.includes(capability), capability);
    }
  });

  it("reached the guest through hybrid vsock after only temporary dial failures while it booted", () => {
    if (t.channel !== "vsock") {
      // virtio-serial has no dial: nothing can have failed.
      assert.deepEqual(t.bootDialFailures, []);
      return;
    }
    // vhost-device-vsock, like Firecracker, closes the Unix connection while nothing listens in the guest.
    const temporary = new Set(["VsockConnectFailed", "VsockHandshakeFailed", "VsockHandshakeTimeout"]);
    assert.deepEqual(t.bootDialFailures.filter((code) => !temporary.has(code)), []);
  });

  it("runs an exec with exactly the given environment", async () => {
    const result = await runExec(t.client, { execId: "env-1", argv: ["/bin/env"], env: { A: "1", B: "two words", PATH } });
    assert.equal(result.exitCode, 0);
    assert.deepEqual(result.stdout.trimEnd().split("\n").sort(), ["A=1", "B=two words", `PATH=${PATH}`]);
  });

  it("gives a job what it expects of a hosted runner: /dev/fd and the std links, 65536 open files, its hostname in /etc/hosts", async () => {
    await t.client.configure({ hostname: "conform-vm" });
    const script = [
      "echo fd=$(readlink /dev/fd) stdout=$(readlink /dev/stdout)",
      "echo piped | cat /dev/stdin",
      "echo to-stderr > /dev/stderr",
      "echo nofile=$(ulimit -n) hard=$(ulimit -Hn)",
      "grep conform-vm /etc/hosts",
      "cat /etc/hostname",
    ].join("\n");
    const result = await runExec(t.client, { execId: "conform-1", argv: ["/bin/sh", "-c", script], env: { PATH } });
    assert.equal(result.exitCode, 0, result.stderr);
    assert.match(result.stdout, /^fd=\/proc\/self\/fd stdout=\/proc\/self\/fd\/1$/m);
    assert.match(result.stdout, /^piped$/m);
    assert.match(result.stderr, /^to-stderr$/m);
    assert.match(result.stdout, /^nofile=65536 hard=65536$/m);
    assert.match(result.stdout, /^127\.0\.1\.1\tconform-vm\t# imp-guest$/m);
    assert.match(result.stdout, /^conform-vm$/m);
  });

  it("reports a non-zero exit code exactly, in the exit event and in exec.status", async () => {
    const result = await runExec(t.client, { execId: "exit-42", argv: ["/bin/sh", "-c", "echo out; echo err >&2; exit 42"], env: { PATH } });
    assert.equal(result.exitCode, 42);
    assert.equal(result.signal, undefined);
    assert.equal(result.stdout, "out\n");
    assert.equal(result.stderr, "err\n");
    const status = await t.client.execStatus("exit-42");
    assert.equal(status.state, "exited");
    assert.equal(status.exitCode, 42);
  });

  it("starts nothing new for a repeated exec with the same id, before and after the first exits", async () => {
    // The command appends a line to a file on the overlay root, then waits to be released.
    const argv = ["/bin/sh", "-c", "echo run >> /root/runs; while [ ! -e /tmp/release-once ]; do sleep 0.1; done"];
    const first = await t.client.exec({ execId: "once-1", argv, env: { PATH } });
    assert.equal(first.started, true);
    assert.equal(first.state, "running");
    const again = await t.client.exec({ execId: "once-1", argv, env: { PATH } });
    assert.equal(again.started, false);
    assert.equal(again.state, "running");
    await runExec(t.client, { execId: "release-once", argv: ["/bin/touch", "/tmp/release-once"], env: { PATH } });
    assert.equal((await waitExited(t.client, "once-1")).exitCode, 0);
    const afterExit = await t.client.exec({ execId: "once-1", argv, env: { PATH } });
    assert.equal(afterExit.started, false);
    assert.equal(afterExit.state, "exited");
    const count = await runExec(t.client, { execId: "count-runs", argv: ["/bin/sh", "-c", "wc -l < /root/runs"], env: { PATH } });
    assert.equal(count.stdout.trim(), "1");
  });

  it("keeps an exec running across a host disconnect and reports its status after reconnecting", async () => {
    const old = t.client;
    const reply = await old.exec({
      execId: "disc-1",
      argv: ["/bin/sh", "-c", "while [ ! -e /tmp/release-disc ]; do sleep 0.1; done; exit 3"],
      env: { PATH },
    });
    assert.equal(reply.started, true);
    const fresh = await t.reconnect();
    assert.equal(old.closed, true);
    assert.notEqual(fresh, old);

    assert.equal((await fresh.execStatus("disc-1")).state, "running");
    const repeated = await fresh.exec({ execId: "disc-1", argv: ["/bin/false"], env: { PATH } });
    assert.equal(repeated.started, false);
    await runExec(fresh, { execId: "release-disc", argv: ["/bin/touch", "/tmp/release-disc"], env: { PATH } });
    const status = await waitExited(fresh, "disc-1");
    assert.equal(status.state, "exited");
    assert.equal(status.exitCode, 3);
  });

  it("serves several host connections at once over vsock (virtio-serial refuses a second one)", async () => {
    if (t.channel !== "vsock") {
      await assert.rejects(t.connect(), /QEMU serves one at a time/);
      return;
    }
    const second = await t.connect();
    try {
      const [a, b] = await Promise.all([
        runExec(t.client, { execId: "par-a", argv: ["/bin/echo", "a"], env: { PATH } }),
        runExec(second, { execId: "par-b", argv: ["/bin/echo", "b"], env: { PATH } }),
      ]);
      assert.deepEqual([a.stdout, b.stdout], ["a\n", "b\n"]);
    } finally {
      second.close();
    }
  });

  it("writes to the overlay root land on the scratch disk and the base image stays byte-identical; shutdown makes QEMU exit 0", async () => {
    const write = await runExec(t.client, {
      execId: "overlay-write",
      argv: ["/bin/sh", "-c", "dd if=/dev/urandom of=/root/big bs=1M count=4 2>/dev/null && echo marker > /etc/imp-marker && sync"],
      env: { PATH },
    });
    assert.equal(write.exitCode, 0, write.stderr);

    await t.client.shutdown("poweroff");
    const exit = await t.vm.exited();
    assert.deepEqual({ code: exit.code, signal: exit.signal }, { code: 0, signal: null });

    assert.equal(await sha256File(t.rootfs), baseSha256, "the base image changed");
    assert.ok(t.scratch !== undefined);
    assert.match(await debugfs(t.scratch, "stat /upper/root/big"), /Size: 4194304\b/);
    assert.equal(await debugfs(t.scratch, "cat /upper/etc/imp-marker"), "marker\n");
    assert.equal(await debugfs(t.scratch, "cat /upper/root/runs"), "run\n");
  });
});
