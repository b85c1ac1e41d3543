import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ImpError } from "../../shared/index.ts";
import { parseAgentConfig } from "./agent-config.ts";

const minimal = { kernels: { default: { kernel: "/k/vmlinux" } }, guestAgent: "/usr/lib/imp/imp-guest" };
const refused = (pattern: RegExp) => (err: unknown): boolean => err instanceof ImpError && err.code === "AgentConfigInvalid" && pattern.test(err.message);

describe("parseAgentConfig", () => {
  it("fills the defaults a node needs, with the node name from NODE_NAME", () => {
    const c = parseAgentConfig(minimal, { NODE_NAME: "worker-1" });
    assert.equal(c.nodeName, "worker-1");
    assert.equal(c.stateDir, "/var/lib/imp");
    assert.equal(c.cgroupParent, "imp/worker-1");
    assert.deepEqual(c.capacity, { vcpu: 8, memoryMiB: 16384, vmSlots: 8 });
    assert.equal(c.supervised, true);
    assert.equal(c.maxConsoleBytes, undefined, "absent: the drivers' own default applies");
    assert.equal(c.kernels.get("default")?.kernel, "/k/vmlinux");
  });

  it("takes a console cap, and refuses one too small to hold a boot's messages", () => {
    assert.equal(parseAgentConfig({ ...minimal, maxConsoleBytes: 1 << 20 }, { NODE_NAME: "n" }).maxConsoleBytes, 1 << 20);
    const raw = { ...minimal, maxConsoleBytes: 1024 };
    assert.throws(() => parseAgentConfig(raw, { NODE_NAME: "n" }), refused(/"maxConsoleBytes" must be at least 65536/));
    const text = { ...minimal, maxConsoleBytes: "16Mi" };
    assert.throws(() => parseAgentConfig(text, { NODE_NAME: "n" }), refused(/"maxConsoleBytes" must be a non-negative integer/));
  });

  it("names the key it refuses: unknown keys, bad enums, a bad node name, a bad netns", () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ ...minimal, maxConsolBytes: 1 }, /unknown key "maxConsolBytes"/],
      [{ ...minimal, vmm: "kvmtool" }, /"vmm" must be auto, qemu or firecracker/],
      [{ ...minimal, accel: "hvf" }, /"accel" must be auto, kvm or tcg/],
      [{ ...minimal, network: { uplink: "eth0", netns: "../../x" } }, /network.netns must name a network namespace/],
      [[], /expected a mapping/],
    ];
    for (const [raw, pattern] of cases) assert.throws(() => parseAgentConfig(raw, { NODE_NAME: "n" }), refused(pattern), String(pattern));
    assert.throws(() => parseAgentConfig(minimal, { NODE_NAME: "Not_A_Name" }), refused(/must be a DNS subdomain/));
  });
});
