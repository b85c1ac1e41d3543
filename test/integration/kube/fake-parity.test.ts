// Proves FakeResourceClient behaves like the API server where Imp's controllers rely on it: every
// case of fake-parity.cases.ts runs against the fake and against a real kube-apiserver + etcd, and
// both must give the same, expected observation.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { startControlPlane, type ControlPlane } from "../../../src/devcluster/index.ts";
import { type CrdManifest } from "../../../src/api/index.ts";
import { FakeResourceClient, createResourceClient, type KubeObject, type ResourceClient, type ResourceDescriptor, installCrds } from "../../../src/kube/index.ts";
import { PARITY_CASES, WIDGET_CRD, type Widget } from "./fake-parity.cases.ts";

const WIDGETS: ResourceDescriptor = { group: "parity.imp.dev", version: "v1", plural: "widgets", kind: "Widget", namespaced: true };
const NAMESPACES: ResourceDescriptor = { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false };
const namespaceOf = (index: number): string => `parity-${index}`;

describe("FakeResourceClient matches the real API server", () => {
  let plane: ControlPlane;
  let real: ResourceClient<Widget>;
  before(async () => {
    plane = await startControlPlane({ controllerManager: false });
    await installCrds(plane.kubeConfig, [structuredClone(WIDGET_CRD) as unknown as CrdManifest], { timeoutMs: 60_000 });
    real = createResourceClient<Widget>(plane.kubeConfig, WIDGETS);
    const namespaces = createResourceClient<KubeObject>(plane.kubeConfig, NAMESPACES);
    for (let i = 0; i < PARITY_CASES.length; i++) await namespaces.create({ metadata: { name: namespaceOf(i) } });
  });
  after(async () => {
    await plane?.stop();
  });

  PARITY_CASES.forEach((c, index) => {
    it(c.name, async () => {
      const fake = new FakeResourceClient<Widget>(WIDGETS, { fields: { "status.nodeName": (w) => w.status?.nodeName } });
      const fromFake = await c.run({ client: fake, namespace: namespaceOf(index) });
      const fromServer = await c.run({ client: real, namespace: namespaceOf(index) });
      assert.deepEqual(fromServer, c.expected, "the real API server behaves as the case expects");
      assert.deepEqual(fromFake, c.expected, "the fake behaves as the real API server");
    });
  });
});
