import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { apiVersionOf, collectionPath, keyOf, parseKey, resourceDescriptor } from "./resource.ts";

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
});
