import { test } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../shared/index.ts";
import { generateNodeKeyPair, openSetup, parseSealedSetup, sealSetup } from "./setup-seal.ts";
import type { ImpVM } from "./schema/impvm.ts";
import type { ImpVMTemplateSpec } from "./schema/impvmtemplate.ts";
import { parseVmInputs, secretKeysNeeded, vmInputsFrom } from "./vm-inputs.ts";

const template: ImpVMTemplateSpec = { classRef: { name: "small" }, image: "r/ci:1", kernel: "default", expireAfter: "1h", imagePullSecretRef: { name: "pull" } };
const vm = {
  metadata: { name: "job-1", namespace: "ci" },
  spec: {
    templateRef: { name: "t" },
    lifecycle: "ephemeral",
    workload: {
      command: ["/bin/true"],
      env: [
        { name: "A", value: "1" },
        { name: "TOKEN", valueFrom: { secretKeyRef: { name: "creds", key: "token" } } },
      ],
      envFrom: [{ secretRef: { name: "bulk" } }],
    },
  },
} as unknown as ImpVM;
const code = (c: string) => (err: unknown) => err instanceof ImpError && err.code === c;

test("exactly the Secret keys a VM reads are picked: one key of a valueFrom, every key of an envFrom and of the pull Secret", () => {
  const needed = secretKeysNeeded(vm, template);
  assert.deepEqual([...needed.keys()].sort(), ["bulk", "creds", "pull"]);
  const found = new Map([
    ["creds", { token: "s3cret", other: "not read by this VM" }],
    ["bulk", { X: "x", Y: "y" }],
    ["pull", { ".dockerconfigjson": "{}" }],
    ["unrelated", { key: "never sealed" }],
  ]);
  assert.deepEqual(vmInputsFrom(needed, found), { v: 1, secrets: { creds: { token: "s3cret" }, bulk: { X: "x", Y: "y" }, pull: { ".dockerconfigjson": "{}" } } });
  assert.deepEqual(vmInputsFrom(needed, new Map()).secrets, {}, "a missing Secret is left out (the agent's plan names it)");
  assert.equal(secretKeysNeeded({ ...vm, spec: { ...vm.spec, workload: { command: ["/bin/true"] } } }, { classRef: template.classRef, image: template.image, kernel: template.kernel, expireAfter: template.expireAfter }).size, 0);
});

test("sealed inputs open only as inputs, only for their VM, only with their node's key", async () => {
  const node = await generateNodeKeyPair();
  const other = await generateNodeKeyPair();
  const plain = new TextEncoder().encode(JSON.stringify(vmInputsFrom(secretKeysNeeded(vm, template), new Map([["creds", { token: "s3cret" }]]))));
  const sealed = parseSealedSetup(JSON.stringify(await sealSetup(plain, node, "uid-1", "inputs")), "inputs");
  assert.deepEqual(parseVmInputs(Buffer.from(await openSetup(sealed, node, "uid-1", "inputs")).toString("utf8")).secrets, { creds: { token: "s3cret" } });
  await assert.rejects(openSetup(sealed, node, "uid-1", "setup"), code("SetupOpenFailed"), "inputs never open as a runner setup");
  await assert.rejects(openSetup(sealed, node, "uid-2", "inputs"), code("SetupOpenFailed"), "nor for another VM");
  await assert.rejects(openSetup({ ...sealed, keyId: other.keyId }, other, "uid-1", "inputs"), code("SetupOpenFailed"), "nor with another node's key");
  await assert.rejects(openSetup(sealed, other, "uid-1", "inputs"), code("SetupSealedToOtherKey"));
  await assert.rejects(sealSetup(new Uint8Array(300 * 1024), node, "uid-1", "inputs"), code("SetupSealedInvalid"), "over 256 KiB is refused before sealing");
  assert.throws(() => parseVmInputs(JSON.stringify({ v: 1, secrets: { a: { k: 1 } } })), code("SetupSealedInvalid"));
});
