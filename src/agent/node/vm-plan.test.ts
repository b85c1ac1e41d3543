import { test } from "node:test";
import assert from "node:assert/strict";
import type { ImpVM, ImpVMClassSpec, ImpVMTemplateSpec } from "../../api/index.ts";
import type { Stored } from "../../kube/index.ts";
import { ImpError } from "../../shared/index.ts";
import { bootRequestOf, planVm, type PlanInputs } from "./vm-plan.ts";

const template: ImpVMTemplateSpec = { classRef: { name: "small" }, image: "127.0.0.1:5000/ci/base:1", extraLayers: [{ image: "127.0.0.1:5000/ci/runner:1" }], kernel: "default", expireAfter: "1h", bootArgs: "quiet loglevel=3" };
const vmClass: ImpVMClassSpec = { vcpu: 2, memoryMiB: 1024, scratchDisk: "2Gi", arch: "amd64" };
const vm = (patch: Partial<ImpVM["spec"]> = {}, labels?: Record<string, string>): Stored<ImpVM> =>
  ({
    apiVersion: "imp.dev/v1alpha1",
    kind: "ImpVM",
    metadata: { name: "job-1", namespace: "ci", uid: "u-1", creationTimestamp: "2026-12-02T10:00:00Z", ...(labels === undefined ? {} : { labels }) },
    spec: { templateRef: { name: "t" }, lifecycle: "ephemeral", workload: { command: ["/bin/sh", "-c", "make test"], env: [{ name: "A", value: "1" }, { name: "TOKEN", valueFrom: { secretKeyRef: { name: "creds", key: "token" } } }], envFrom: [{ secretRef: { name: "bulk" }, prefix: "B_" }], user: "1000" }, ...patch },
  }) as Stored<ImpVM>;
const inputs = (over: Partial<PlanInputs> = {}): PlanInputs => ({
  vm: vm(),
  template,
  vmClass,
  secrets: new Map([["creds", { token: "s3cret" }], ["bulk", { X: "x" }]]),
  kernels: new Map([["default", { kernel: "/k/vmlinuz", initrd: "/k/initrd", args: ["console=ttyS0"] }]]),
  baseEnv: { PATH: "/usr/bin:/bin" },
  ...over,
});
const code = (c: string) => (err: unknown) => err instanceof ImpError && err.code === c;

test("a VM's plan takes shape from its class, template, kernel map and Secrets", () => {
  const plan = planVm(inputs());
  assert.equal(plan.vcpus, 2);
  assert.equal(plan.memoryMiB, 1024);
  assert.equal(plan.scratchBytes, 2 * 1024 ** 3);
  assert.deepEqual(plan.extraLayers, ["127.0.0.1:5000/ci/runner:1"]);
  assert.deepEqual(plan.bootArgs, ["quiet", "loglevel=3"]);
  assert.deepEqual(plan.workload.env, { PATH: "/usr/bin:/bin", B_X: "x", A: "1", TOKEN: "s3cret" });
  assert.equal(plan.workload.uid, 1000);
  assert.equal(plan.workload.gid, 1000);
  assert.equal(plan.expiresAtMs, Date.parse("2026-12-02T11:00:00Z"));
  assert.equal(plan.requiresSetup, false);
  assert.equal(planVm(inputs({ vm: vm({}, { "imp.dev/pool": "p" }) })).requiresSetup, false, "a pool label alone does not make a runner VM");
  assert.equal(planVm(inputs({ vm: vm({ runnerSetup: "Required" }) })).requiresSetup, true);
});

test("what a plan refuses: unknown kernel, reserved boot args, a missing Secret, user names, reserved env", () => {
  assert.throws(() => planVm(inputs({ kernels: new Map() })), code("KernelNotConfigured"));
  for (const bootArgs of ["init=/bin/sh", "root=/dev/vdb", "imp.scratch=/dev/vda", "console=tty0"]) {
    assert.throws(() => planVm(inputs({ template: { ...template, bootArgs } })), code("BootArgRefused"), bootArgs);
  }
  assert.throws(() => planVm(inputs({ secrets: new Map([["bulk", {}]]) })), code("SecretNotFound"));
  assert.throws(() => planVm(inputs({ vm: vm({ workload: { command: ["x"], user: "runner" } }) })), code("UserNotNumeric"));
  assert.throws(() => planVm(inputs({ secrets: new Map([["creds", { token: "t" }], ["bulk", { RUNNER_JITCONFIG: "x" }]]), vm: vm({ workload: { command: ["x"], envFrom: [{ secretRef: { name: "bulk" }, prefix: "IMP_" }] } }) })), code("ReservedEnv"));
  assert.throws(() => planVm(inputs({ template: undefined })), code("TemplateNotFound"));
});

test("a VM's cache volume is planned in its own namespace, in bytes, and makes its boot a boot (a snapshot has no cache disk)", () => {
  const cache = { volume: "pool-uid-1", size: "2Gi", paths: ["/var/lib/docker", "/home/runner/.cache"] };
  const plan = planVm(inputs({ vm: vm({ cache }), vmClass: { ...vmClass, startFrom: "Snapshot" } }));
  assert.deepEqual(plan.cache, { namespace: "ci", volume: "pool-uid-1", sizeBytes: 2 * 1024 ** 3, paths: ["/var/lib/docker", "/home/runner/.cache"] });
  assert.equal(plan.startFrom, "Snapshot");
  const request = bootRequestOf(plan, "qemu");
  assert.deepEqual(request.cache, plan.cache);
  assert.equal(request.startFrom, "Boot");
  const plain = planVm(inputs({ vmClass: { ...vmClass, startFrom: "Snapshot" } }));
  assert.equal(plain.cache, undefined);
  assert.equal(bootRequestOf(plain, "qemu").startFrom, "Snapshot", "without a cache the class's startFrom stands");
  for (const bootArgs of ["imp.cache=/dev/vda", "imp.cache", "imp.scratch"]) assert.throws(() => planVm(inputs({ template: { ...template, bootArgs } })), code("BootArgRefused"), `a template cannot set or clear ${bootArgs}`);
});
