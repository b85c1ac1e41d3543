import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ImpError } from "../../shared/index.ts";
import { MemorySetupStore } from "./memory-setup-store.ts";

const vm = { uid: "u-1", name: "vm-1", namespace: "ns" };
const signal = new AbortController().signal;
const codeOf = (err: unknown): string => (err instanceof ImpError ? err.code : String(err));

describe("MemorySetupStore (the fake SetupStore)", () => {
  it("hands out a minted setup, records its send once, and refuses a second send of it", async () => {
    const store = new MemorySetupStore();
    assert.equal(await store.readSealed(vm), undefined, "nothing minted yet");
    store.mint(vm, "sealed-bytes");
    assert.equal(await store.readSealed(vm), "sealed-bytes");
    await store.recordSent(vm, "exec-1", signal);
    assert.equal(store.setups.get(vm.uid)?.state, "Sent");
    assert.deepEqual(store.sent, ["vm-1:exec-1"]);
    await assert.rejects(store.recordSent(vm, "exec-1", signal), (err) => codeOf(err) === "SetupAlreadySent");
    await assert.rejects(store.recordSent(vm, "exec-2", signal), (err) => codeOf(err) === "ExecIdMismatch");
  });

  it("records the exec of a VM without a setup, and forgets a deleted setup's bytes", async () => {
    const store = new MemorySetupStore();
    const plain = { ...vm, uid: "u-2" };
    await store.recordSent(plain, "exec-9", signal);
    await store.recordSent(plain, "exec-9", signal); // the same exec again: no setup to send twice
    assert.deepEqual(store.sent, ["vm-1:exec-9", "vm-1:exec-9"]);
    store.mint(vm, "sealed-bytes");
    await store.delete(vm);
    await store.delete(vm);
    assert.equal(store.setups.get(vm.uid)?.state, "Deleted");
    assert.equal(store.setups.get(vm.uid)?.sealed, undefined);
    assert.equal(await store.readSealed(vm), undefined);
  });
});
