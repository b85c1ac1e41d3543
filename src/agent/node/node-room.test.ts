import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { capacityForJobs, fitsBeside } from "./node-room.ts";

const capacity = { vcpu: 4, memoryMiB: 4096, vmSlots: 4 };

describe("the node's room for its template VMs", () => {
  it("a template fits only where every dimension has room beside the job VMs", () => {
    assert.equal(fitsBeside(capacity, { vcpu: 2, memoryMiB: 2048, vmSlots: 2 }, { vcpu: 2, memoryMiB: 2048, vmSlots: 1 }), true);
    assert.equal(fitsBeside(capacity, { vcpu: 3, memoryMiB: 1024, vmSlots: 1 }, { vcpu: 2, memoryMiB: 512, vmSlots: 1 }), false, "vCPUs");
    assert.equal(fitsBeside(capacity, { vcpu: 1, memoryMiB: 3584, vmSlots: 1 }, { vcpu: 1, memoryMiB: 1024, vmSlots: 1 }), false, "memory");
    assert.equal(fitsBeside(capacity, { vcpu: 1, memoryMiB: 512, vmSlots: 4 }, { vcpu: 1, memoryMiB: 512, vmSlots: 1 }), false, "slots");
  });

  it("the capacity left to job VMs is the node's less what its templates hold, never negative", () => {
    assert.deepEqual(capacityForJobs(capacity, { vcpu: 0, memoryMiB: 0, vmSlots: 0 }), capacity);
    assert.deepEqual(capacityForJobs(capacity, { vcpu: 2, memoryMiB: 1024, vmSlots: 1 }), { vcpu: 2, memoryMiB: 3072, vmSlots: 3 });
    assert.deepEqual(capacityForJobs(capacity, { vcpu: 8, memoryMiB: 8192, vmSlots: 5 }), { vcpu: 0, memoryMiB: 0, vmSlots: 0 });
  });
});
