/**
 * Type-level checks of the public types (run by `tsc`, which type-checks tests) plus a runtime
 * check that the TypeBox schema agrees with the static type on the same objects.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Value } from "@sinclair/typebox/value";
import { API_VERSION, ImpVMStatus, type ImpVM, type ImpVMRunnerPoolSpec, type VMPhase } from "./index.ts";

test("ImpVM types accept a well-formed VM and reject unknown phases and scopes at compile time", () => {
  const vm: ImpVM = {
    apiVersion: API_VERSION,
    kind: "ImpVM",
    metadata: { name: "vm-1", namespace: "ci" },
    spec: { templateRef: { name: "runner" }, lifecycle: "ephemeral" },
    status: { phase: "Running", nodeName: "worker-1", runner: { id: 7, name: "vm-1" }, setup: { state: "Delivered" } },
  };
  // @ts-expect-error "Crashed" is not a phase
  const bad: VMPhase = "Crashed";
  // @ts-expect-error scope is a closed set
  const scope: ImpVMRunnerPoolSpec["github"]["scope"] = "team";
  assert.ok(Value.Check(ImpVMStatus, vm.status));
  assert.equal(Value.Check(ImpVMStatus, { phase: bad }), false);
  assert.equal(typeof scope, "string");
});
