/**
 * End to end: the node network manager with REAL QEMU VMs on its taps, inside network namespaces the
 * test creates (test/integration/network/topology.ts: a "node" namespace with the bridge and taps, an
 * "out" namespace beyond the uplink with the internet host, cluster addresses and the metadata
 * address). QEMU (and its vsock backend) run in the node namespace through `ip netns exec`, where
 * the taps are. Each guest's network is set by the guest agent's `configure`, and every connection
 * attempt is busybox `nc` run inside the guest through the agent's `exec`. The internet host answers
 * (seeing the node's uplink address); the node, the cluster, metadata and the other VM do not.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, cp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GuestClient, readHostTscKhz } from "../../src/agent/index.ts";
import { QemuVm, type LaunchRequest, type ProcessLauncher } from "../../src/agent/vmm/index.ts";
import { NodeNetwork, type NodeNetworkLease } from "../../src/agent/network/index.ts";
import { DirectLauncher } from "../../src/agent/vmm/direct-launcher.ts";
import { ImpError } from "../../src/shared/index.ts";
import { loadBootKit, makeScratchDisk, runExec, type BootKit } from "../harness/vm.ts";
import { networkTestsUnavailable, sh, TestNetwork } from "../integration/network/netns.ts";
import { buildTopology, forbiddenTargets, PLAN, type Topology } from "../integration/network/topology.ts";

const PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

async function whyNot(): Promise<string | undefined> {
  const net = await networkTestsUnavailable();
  if (net !== undefined) return net;
  try {
    await loadBootKit();
  } catch (err) {
    return `no boot kit: ${(err as Error).message}`;
  }
  return undefined;
}
const unavailable = await whyNot();

/** Starts every process of a VM inside `netns` (`ip netns exec` execs in place: the pid stays the program's). */
function launcherIn(netns: string): ProcessLauncher {
  const direct = new DirectLauncher({ dieWithParent: true });
  return {
    launch: (request: LaunchRequest) => direct.launch({ ...request, binary: "ip", args: ["netns", "exec", netns, request.binary, ...request.args] }),
  };
}

interface Guest {
  readonly lease: NodeNetworkLease;
  readonly vm: QemuVm;
  readonly client: GuestClient;
  readonly dir: string;
}

async function bootGuest(kit: BootKit, netns: string, name: string, lease: NodeNetworkLease): Promise<Guest> {
  const dir = await mkdtemp(join(tmpdir(), "imp-vmn-"));
  const rootfs = join(dir, "rootfs.ext4");
  const scratch = join(dir, "scratch.ext4");
  await cp(kit.rootfs, rootfs);
  await makeScratchDisk(scratch, 64);
  const channel = kit.vhostDeviceVsock === null ? "serial" : "vsock";
  const tscKhz = await readHostTscKhz();
  const vm = await QemuVm.start({
    dir: join(dir, "vm"),
    channel,
    launcher: launcherIn(netns),
    ...(kit.vhostDeviceVsock === null ? {} : { vhostDeviceVsock: kit.vhostDeviceVsock }),
    machine: {
      kernel: kit.kernel,
      initrd: kit.initrd,
      cmdline: ["console=ttyS0", "quiet", "panic=-1", "ro", "root=/dev/vda", `init=${kit.guestInit}`, "imp.scratch=/dev/vdb"],
      memoryMiB: 256,
      vcpus: 1,
      accel: "tcg",
      ...(tscKhz === undefined ? {} : { tscKhz }),
      drives: [{ id: "root", path: rootfs }, { id: "scratch", path: scratch }],
      tap: { tap: lease.tap, mac: lease.mac },
    },
  });
  try {
    const deadline = Date.now() + 120_000;
    const stream = await vm.connectGuest({ timeoutMs: 120_000 });
    const client = new GuestClient(stream, { clientName: "imp-e2e-network" });
    client.on("close", () => undefined);
    // Over virtio-serial the first frames may be lost before the guest opens its port: ask again.
    for (;;) {
      try {
        await client.hello({ timeoutMs: channel === "serial" ? 500 : Math.max(1, deadline - Date.now()), signal: vm.downSignal });
        break;
      } catch (err) {
        if (vm.downSignal.aborted || Date.now() >= deadline || !(err instanceof ImpError && err.code === "GuestTimeout")) throw err;
      }
    }
    await client.configure({ hostname: name, network: lease.guest });
    return { lease, vm, client, dir };
  } catch (err) {
    await vm.stop(2_000);
    throw new Error(`Cannot boot ${name}: ${String(err)}\n--- console ---\n${vm.serial.tail(40)}`, { cause: err });
  }
}

/** Runs busybox nc against every target concurrently inside the guest; "ok <reply>" or "fail". */
async function probeFromGuest(guest: Guest, execId: string, targets: readonly string[]): Promise<Map<string, string>> {
  const script = [
    'probe() { if out=$(nc -w 5 "${1%:*}" "${1##*:}" </dev/null 2>/dev/null) && [ -n "$out" ]; then echo "$1 ok $out"; else echo "$1 fail"; fi; }',
    ...targets.map((t) => `probe ${t} &`),
    "wait",
  ].join("\n");
  const result = await runExec(guest.client, { execId, argv: ["/bin/sh", "-c", script], env: { PATH } }, 60_000);
  assert.equal(result.exitCode, 0, result.stderr);
  return new Map(result.stdout.trim().split("\n").map((line) => {
    const [target = "", ...rest] = line.split(" ");
    return [target, rest.join(" ")] as const;
  }));
}

describe("VM network isolation with real QEMU guests", { skip: unavailable, timeout: 420_000 }, () => {
  const net = new TestNetwork();
  let topo: Topology;
  let network: NodeNetwork;
  const guests: Guest[] = [];

  before(async () => {
    const kit = await loadBootKit();
    topo = await buildTopology(net);
    network = await NodeNetwork.open({ netns: topo.node, config: { uplink: "up0", blockedCidrs: [...PLAN.blockedCidrs], allowedCidrs: [...PLAN.allowedCidrs], dns: [PLAN.dns] } });
    const leases = [await network.attach("vm-a"), await network.attach("vm-b")];
    // One at a time: two TCG boots at once on a shared 2-core machine only make both slow.
    for (const [i, lease] of leases.entries()) guests.push(await bootGuest(kit, topo.node, `vm-${"ab"[i]}`, lease));
  });

  after(async () => {
    for (const g of guests) {
      g.client.close();
      await g.vm.stop(3_000);
      await rm(g.dir, { recursive: true, force: true });
    }
    await network?.teardown();
    await net.dispose();
    assert.deepEqual(await net.leftovers(), [], "namespaces or links of this test remain");
    const hostLinks = await sh(["ip", "-o", "link", "show"]);
    for (const g of guests) assert.ok(!hostLinks.includes(g.lease.tap), `tap ${g.lease.tap} is in the host's namespace`);
  });

  it("configures the guest's eth0 through the agent: address, default route, resolver", async () => {
    const [a] = guests;
    assert.ok(a !== undefined);
    const result = await runExec(a.client, { execId: "show-net", argv: ["/bin/sh", "-c", "ip -o addr show dev eth0; ip route; cat /etc/resolv.conf; cat /sys/class/net/eth0/address"], env: { PATH } });
    assert.equal(result.exitCode, 0, result.stderr);
    assert.match(result.stdout, new RegExp(`inet ${a.lease.address.replaceAll(".", "\\.")} `));
    assert.match(result.stdout, new RegExp(`^default via ${a.lease.gateway.replaceAll(".", "\\.")} dev eth0`, "m"));
    assert.match(result.stdout, new RegExp(`^nameserver ${PLAN.dns.replaceAll(".", "\\.")}$`, "m"));
    assert.match(result.stdout, new RegExp(`^${a.lease.mac}$`, "m"));
  });

  it("lets each guest reach the internet host, masqueraded to the node's uplink address", async () => {
    for (const [i, g] of guests.entries()) {
      const internet = `${PLAN.internet}:${PLAN.port}`;
      const results = await probeFromGuest(g, `internet-${i}`, [internet]);
      assert.equal(results.get(internet), `ok out ${PLAN.nodeUplink}`, JSON.stringify([...results]));
    }
  });

  it("refuses each guest the node, the cluster, metadata, a DNATed service and the other guest", async () => {
    const [a, b] = guests;
    assert.ok(a !== undefined && b !== undefined);
    // The other guest really listens: a server in b, checked from inside b.
    const server = await b.client.exec({ execId: "server-b", argv: ["/bin/nc", "-ll", "-p", String(PLAN.port), "-e", "/bin/echo", "vm-b"], env: { PATH } });
    assert.equal(server.state, "running");
    const own = await probeFromGuest(b, "own-b", [`${b.lease.ip}:${PLAN.port}`]);
    assert.equal(own.get(`${b.lease.ip}:${PLAN.port}`), "ok vm-b");
    for (const [from, other] of [[a, b], [b, a]] as const) {
      const forbidden = forbiddenTargets(other.lease.ip, from.lease.gateway);
      const results = await probeFromGuest(from, `forbidden-${from.lease.ip}`, Object.values(forbidden));
      for (const [what, target] of Object.entries(forbidden)) {
        assert.equal(results.get(target), "fail", `${what} (${target}) from ${from.lease.ip}: ${JSON.stringify([...results])}`);
      }
    }
    await b.client.signal("server-b", "SIGKILL");
  });

  it("refuses them by the manager's ruleset: without it the guest reaches metadata, cluster and gateway; open() restores it", async () => {
    const [a] = guests;
    assert.ok(a !== undefined);
    const targets = [`${PLAN.metadata}:${PLAN.port}`, `${PLAN.clusterService}:${PLAN.port}`, `${a.lease.gateway}:${PLAN.port}`];
    await net.exec(topo.node, ["nft", "delete", "table", "inet", "imp"]);
    const open = await probeFromGuest(a, "control-open", targets);
    for (const target of targets) assert.match(open.get(target) ?? "", /^ok /, `control ${target}: ${JSON.stringify([...open])}`);
    network = await NodeNetwork.open({ netns: topo.node, config: { uplink: "up0", blockedCidrs: [...PLAN.blockedCidrs], allowedCidrs: [...PLAN.allowedCidrs], dns: [PLAN.dns] } });
    const closed = await probeFromGuest(a, "control-closed", targets);
    for (const target of targets) assert.equal(closed.get(target), "fail", `${target} after open(): ${JSON.stringify([...closed])}`);
  });

  it("detaching one VM's network leaves the other guest online", async () => {
    const [a, b] = guests;
    assert.ok(a !== undefined && b !== undefined);
    await b.vm.stop(3_000);
    await network.detach("vm-b");
    const links = await net.exec(topo.node, ["ip", "-o", "link", "show"]);
    assert.ok(!links.includes(b.lease.tap) && links.includes(a.lease.tap), links);
    const internet = `${PLAN.internet}:${PLAN.port}`;
    const results = await probeFromGuest(a, "internet-after-detach", [internet, `${PLAN.metadata}:${PLAN.port}`]);
    assert.equal(results.get(internet), `ok out ${PLAN.nodeUplink}`);
    assert.equal(results.get(`${PLAN.metadata}:${PLAN.port}`), "fail");
  });
});
