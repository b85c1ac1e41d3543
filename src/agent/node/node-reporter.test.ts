import { test } from "node:test";
import assert from "node:assert/strict";
import { ANNOTATIONS, generateNodeKeyPair, IMP_NODES, type ImpNode } from "../../api/index.ts";
import { FakeResourceClient, LEASE_RESOURCE, type Lease } from "../../kube/index.ts";
import { FakeClock, silentLogger } from "../../shared/index.ts";
import type { DecommissionRequest } from "./decide-decommission.ts";
import { NodeReporter, type DecommissionOutcome, type NodeReporterOptions } from "./node-reporter.ts";

/** A reporter of node n1 on fake clients; `options` override the defaults. */
async function fakeReporter(capacity: { vcpu: number; memoryMiB: number; vmSlots: number }, options: Partial<NodeReporterOptions> & Pick<NodeReporterOptions, "allocated">): Promise<{ reporter: NodeReporter; nodes: FakeResourceClient<ImpNode>; leases: FakeResourceClient<Lease> }> {
  const clock = new FakeClock();
  const nodes = new FakeResourceClient<ImpNode>(IMP_NODES, { clock });
  const leases = new FakeResourceClient<Lease>(LEASE_RESOURCE, { clock });
  const reporter = new NodeReporter({
    nodeName: "n1",
    nodes,
    leases,
    leaseNamespace: "imp",
    facts: { arch: "amd64", kvm: false, accel: "tcg", kvmReason: "none", vmms: ["qemu"], kernels: ["default"], capacity, versions: { agent: "0" } },
    key: await generateNodeKeyPair(),
    imageCache: async () => ({ images: 0, usedBytes: 0 }),
    clock,
    logger: silentLogger,
    ...options,
  });
  return { reporter, nodes, leases };
}

test("a node asked to decommission keeps reporting while its agent waits, then deletes its Lease and ImpNode and never registers again", async () => {
  const asked: DecommissionRequest[] = [];
  let answer: DecommissionOutcome = "waiting";
  let vms = 1;
  const { reporter, nodes, leases } = await fakeReporter({ vcpu: 2, memoryMiB: 2048, vmSlots: 2 }, {
    allocated: () => ({ vcpu: vms, memoryMiB: 0, vmSlots: vms }),
    decommission: async (request) => {
      asked.push(request);
      return answer;
    },
  });
  await reporter.reportOnce();
  assert.equal(asked.length, 0, "no request, no question");
  assert.ok(await nodes.get({ name: "n1" }));

  await nodes.patch({ name: "n1" }, { metadata: { annotations: { [ANNOTATIONS.decommission]: "2026-12-05T12:00:00Z", [ANNOTATIONS.decommissionKeepState]: "true" } } });
  vms = 0;
  await reporter.reportOnce();
  assert.deepEqual(asked, [{ requestedAtMs: Date.parse("2026-12-05T12:00:00Z"), keepState: true }]);
  assert.equal((await nodes.get({ name: "n1" })).status?.allocated?.vmSlots, 0, "still reporting while the agent waits");
  const renewals = leases.calls.patch;

  answer = "retired";
  await reporter.reportOnce();
  assert.equal(reporter.retired, true);
  assert.deepEqual([(await nodes.list()).items, (await leases.list()).items], [[], []], "the ImpNode and the Lease are gone");
  await reporter.reportOnce();
  assert.deepEqual([(await nodes.list()).items.length, leases.calls.patch, leases.calls.create, asked.length], [0, renewals, 1, 2], "no renewal in the retiring round, nothing written or asked after it");
});

test("while a template VM is built the node reports that much less capacity, and its full capacity again after", async () => {
  let templates = { vcpu: 0, memoryMiB: 0, vmSlots: 0 };
  const { reporter, nodes } = await fakeReporter({ vcpu: 4, memoryMiB: 4096, vmSlots: 4 }, { allocated: () => ({ vcpu: 1, memoryMiB: 512, vmSlots: 1 }), heldByTemplates: () => templates });
  await reporter.reportOnce();
  assert.deepEqual((await nodes.get({ name: "n1" })).status?.capacity, { vcpu: 4, memoryMiB: 4096, vmSlots: 4 });
  templates = { vcpu: 2, memoryMiB: 1024, vmSlots: 1 };
  await reporter.reportOnce();
  assert.deepEqual((await nodes.get({ name: "n1" })).status?.capacity, { vcpu: 2, memoryMiB: 3072, vmSlots: 3 });
  assert.deepEqual((await nodes.get({ name: "n1" })).status?.allocated, { vcpu: 1, memoryMiB: 512, vmSlots: 1 }, "job VMs are counted as before");
  templates = { vcpu: 0, memoryMiB: 0, vmSlots: 0 };
  await reporter.reportOnce();
  assert.deepEqual((await nodes.get({ name: "n1" })).status?.capacity, { vcpu: 4, memoryMiB: 4096, vmSlots: 4 });
});
