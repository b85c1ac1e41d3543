/**
 * readNodeState on real host state made for the test: a VM directory with a disk and a listening
 * unix socket, a live process naming the directory, a port with Imp's alias in a network namespace
 * of its own, and a per-VM cgroup. Each is found and attributed to its uid, and is gone from the
 * answer once it is gone from the host.
 */
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, rmdir, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { waitFor } from "../../src/shared/index.ts";
import { buildingTemplates, mentionsPath, readNodeState, TEMPLATE_BUILD_MAX_MS, uidInText, type NodeResource } from "./node-state.ts";

const UID = "0f3c2a9e-1111-4222-8333-944455556666";
const kinds = (rs: readonly NodeResource[]): string[] => [...new Set(rs.map((r) => r.kind))].sort();

describe("readNodeState", () => {
  it("buildingTemplates names a node's template VM directories young enough to be building, and not job VMs' or old ones", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "imp-node-state-tpl-"));
    try {
      await mkdir(join(stateDir, "vms", "tpl-0123"), { recursive: true });
      await mkdir(join(stateDir, "vms", "3f1c-uid"), { recursive: true });
      const node = { nodeName: "node-b", stateDir } as Parameters<typeof buildingTemplates>[0];
      assert.deepEqual(await buildingTemplates(node), ["node-b/tpl-0123"]);
      assert.deepEqual(await buildingTemplates(node, Date.now() + TEMPLATE_BUILD_MAX_MS + 1_000), [], "past the longest build: a leftover");
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });

  it("uidInText finds the uid after <stateDir>/vms/", () => {
    assert.equal(uidInText("/s", `qemu -drive file=/s/vms/${UID}/base.ext4,ro`), UID);
    assert.equal(uidInText("/s", "qemu -drive file=/other/vms/x"), undefined);
  });

  it("mentionsPath does not take a sibling state dir for the node's", () => {
    assert.equal(mentionsPath("qemu -drive file=/t/node-a/vms/u/base.ext4", "/t/node-a"), true);
    assert.equal(mentionsPath("imp agent --state /t/node-a", "/t/node-a"), true);
    assert.equal(mentionsPath("qemu -drive file=/t/node-ab/vms/u/base.ext4", "/t/node-a"), false);
  });

  it("finds and attributes processes, sockets, disks, the VM dir, a port and a cgroup; forgets them once gone", { skip: process.getuid?.() !== 0 ? "needs root (network namespace, cgroup)" : false }, async (t) => {
    const stateDir = await mkdtemp(join(tmpdir(), "imp-node-state-"));
    const vmDir = join(stateDir, "vms", UID);
    const netns = `imp-ns-test-${process.pid}`;
    const cgroupRoot = join("/sys/fs/cgroup/memory", `imp-test-${process.pid}`);
    const cgroupParent = `imp-test-${process.pid}/node-x`;
    const cgroupLeaf = join("/sys/fs/cgroup/memory", cgroupParent, UID, "qemu");
    const haveCgroupV1 = existsSync("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    const server = createServer();
    const held: { child?: ReturnType<typeof spawn>; agent?: ReturnType<typeof spawn> } = {};
    // Registered first, so a failure half-way leaves nothing (and nothing keeps the test process alive).
    t.after(async () => {
      held.child?.kill("SIGKILL");
      held.agent?.kill("SIGKILL");
      server.close();
      try {
        execFileSync("ip", ["netns", "del", netns], { stdio: "ignore" });
      } catch {
        // never created
      }
      for (const p of [cgroupLeaf, join("/sys/fs/cgroup/memory", cgroupParent, UID), join("/sys/fs/cgroup/memory", cgroupParent), cgroupRoot]) await rmdir(p).catch(() => undefined);
      await rm(stateDir, { recursive: true, force: true });
    });
    await mkdir(join(vmDir, "vmm"), { recursive: true });
    await writeFile(join(vmDir, "base.ext4"), Buffer.alloc(4096));
    await new Promise<void>((resolve) => server.listen(join(vmDir, "vmm", "api.sock"), resolve));
    const started = spawn(process.execPath, ["-e", "setTimeout(() => {}, 120000)", join(vmDir, "vmm", "fake-vmm")], { stdio: "ignore" });
    held.child = started;
    const agentLike = spawn(process.execPath, ["-e", "setTimeout(() => {}, 120000)", join(stateDir, "agent.yaml")], { stdio: "ignore" });
    held.agent = agentLike;
    execFileSync("ip", ["netns", "add", netns]);
    execFileSync("ip", ["-n", netns, "tuntap", "add", "dev", "imp-0123456789", "mode", "tap"]);
    execFileSync("ip", ["-n", netns, "link", "set", "imp-0123456789", "alias", `imp-vm 10.200.0.2 none ${UID}`]);
    execFileSync("ip", ["-n", netns, "tuntap", "add", "dev", "imp-fffffffff", "mode", "tap"]); // named like a tap, no alias: nobody's
    if (haveCgroupV1) await mkdir(cgroupLeaf, { recursive: true });
    // Both children have exec'd (their command lines are theirs, not a copy of ours) before anything is read.
    for (const [pid, needle] of [[started.pid, "fake-vmm"], [agentLike.pid, "agent.yaml"]] as const) {
      await waitFor(`pid ${pid} exec'd`, async () => ((await readFile(`/proc/${pid ?? 0}/cmdline`, "utf8").catch(() => "")).includes(needle) ? true : undefined), { timeoutMs: 30_000, intervalMs: 20 });
    }
    const node = { nodeName: "node-x", stateDir, netns, cgroupParent };

    const all = await readNodeState(node);
    assert.deepEqual(kinds(all), [...(haveCgroupV1 ? ["cgroup"] : []), "disk", "process", "socket", "tap", "vm-dir"], JSON.stringify(all, null, 1));
    assert.ok(all.filter((r) => r.kind !== "tap" || r.detail.startsWith("imp-0123456789")).every((r) => r.uid === UID), "each attributed to the VM");
    assert.ok(all.some((r) => r.kind === "tap" && r.uid === undefined && r.detail.startsWith("imp-fffffffff")), "a port with the prefix and no alias is reported as nobody's");
    assert.ok(all.some((r) => r.kind === "process" && r.detail.includes(`pid ${started.pid}`)));
    assert.ok(!all.some((r) => r.kind === "process" && r.detail.includes(`pid ${agentLike.pid}`)), "a process naming the state dir but no VM directory is the node's own");
    assert.deepEqual(kinds(await readNodeState(node, { uid: "someone-else" })), []);

    started.kill("SIGKILL");
    await new Promise((resolve) => started.once("exit", resolve));
    server.close();
    execFileSync("ip", ["-n", netns, "link", "del", "imp-0123456789"]);
    execFileSync("ip", ["-n", netns, "link", "del", "imp-fffffffff"]);
    await rm(vmDir, { recursive: true, force: true });
    if (haveCgroupV1) await rmdir(cgroupLeaf);
    const after = await readNodeState(node, { uid: UID });
    assert.deepEqual(after.map((r) => r.kind), haveCgroupV1 ? ["cgroup"] : [], "only the (empty) VM cgroup group remains");
  });
});
