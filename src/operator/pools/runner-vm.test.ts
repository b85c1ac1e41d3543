import assert from "node:assert/strict";
import { test } from "node:test";
import type { ImpVMRunnerPool } from "../../api/index.ts";
import type { Stored } from "../../kube/index.ts";
import { newRunnerVm } from "./runner-vm.ts";

const pool = (spec: Partial<ImpVMRunnerPool["spec"]> = {}): Stored<ImpVMRunnerPool> =>
  ({
    apiVersion: "imp.dev/v1alpha1",
    kind: "ImpVMRunnerPool",
    metadata: { name: "linux", namespace: "ci", uid: "7f3c2a10-0000-4000-8000-000000000001" },
    spec: { templateName: "t", gitea: { url: "http://gitea", credentialsSecretRef: { name: "g" }, scope: "org", organization: "o", labels: ["imp"] }, minIdle: 0, maxConcurrent: 2, scaleUpStep: 1, runnerCommand: ["/run"], ...spec },
  }) as Stored<ImpVMRunnerPool>;

test("a pool's runner VM carries the pool's cache volume under the pool's UID, a copy of its paths", () => {
  const paths = ["/var/lib/docker"];
  const vm = newRunnerVm(pool({ cache: { size: "10Gi", paths } }));
  assert.deepEqual(vm.spec.cache, { volume: "7f3c2a10-0000-4000-8000-000000000001", size: "10Gi", paths: ["/var/lib/docker"] });
  assert.notEqual(vm.spec.cache?.paths, paths, "the VM's list is its own");
  assert.equal(newRunnerVm(pool()).spec.cache, undefined, "no cache asked, none given");
});
