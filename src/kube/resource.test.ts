import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ImpError } from "../shared/index.ts";
import { apiVersionOf, asStored, collectionPath, keyOf, parseKey, resourceDescriptor, type ResourceDescriptor } from "./resource.ts";

const pods: ResourceDescriptor = { group: "", version: "v1", plural: "pods", kind: "Pod", namespaced: true };

describe("resource helpers", () => {
  const kindNames = { kind: "ImpVM", listKind: "ImpVMList", plural: "impvms", singular: "impvm", scope: "Namespaced" } as const;
  const impvms = resourceDescriptor({ group: "imp.dev", version: "v1alpha1", ...kindNames });
  const configMaps = { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true };

  it("resourceDescriptor() maps CRD-style names, ignoring extra fields", () => {
    assert.deepEqual(impvms, { group: "imp.dev", version: "v1alpha1", plural: "impvms", kind: "ImpVM", namespaced: true });
  });

  it("builds core and group paths and apiVersions", () => {
    assert.equal(collectionPath(configMaps, "ns"), "/api/v1/namespaces/ns/configmaps");
    assert.equal(collectionPath(impvms), "/apis/imp.dev/v1alpha1/impvms");
    assert.equal(apiVersionOf(configMaps), "v1");
    assert.equal(apiVersionOf(impvms), "imp.dev/v1alpha1");
  });

  it("keys namespaced objects as namespace/name and cluster-scoped ones as name", () => {
    assert.equal(keyOf({ metadata: { namespace: "ci", name: "vm-1" } }), "ci/vm-1");
    assert.equal(keyOf({ metadata: { name: "node-a" } }), "node-a");
    assert.deepEqual(parseKey("ci/vm-1"), { namespace: "ci", name: "vm-1" });
    assert.deepEqual(parseKey("node-a"), { namespace: undefined, name: "node-a" });
  });

  it("asStored() passes an object with a name and a uid and refuses one without, naming what is missing", () => {
    const stored = { metadata: { name: "p", namespace: "ns", uid: "u-1" } };
    assert.equal(asStored(stored, pods), stored, "the same object, only its type narrowed");
    const cases: Array<[unknown, RegExp]> = [
      [{}, /Pod without metadata\.name/],
      [{ metadata: { uid: "u" } }, /Pod without metadata\.name/],
      [{ metadata: { name: "", uid: "u" } }, /Pod without metadata\.name/],
      [{ metadata: { name: "p" } }, /Pod without metadata\.uid/],
      [{ metadata: { name: "p", uid: "" } }, /Pod without metadata\.uid/],
    ];
    for (const [obj, message] of cases) {
      assert.throws(() => asStored(obj as never, pods), (err: unknown) => err instanceof ImpError && err.code === "MalformedObject" && err.errorClass === "terminal" && message.test(err.message), JSON.stringify(obj));
    }
  });
});
