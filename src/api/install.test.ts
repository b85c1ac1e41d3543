import assert from "node:assert/strict";
import { test } from "node:test";
import { dumpYaml } from "@kubernetes/client-node";
import { parse } from "yaml";
import { buildAllCrds } from "./crd.ts";
import { toClientModel } from "./install.ts";

test("toClientModel() survives the client's serializer: what is sent equals the generated CRD", () => {
  for (const crd of buildAllCrds()) {
    const sent: unknown = parse(dumpYaml(toClientModel(crd)));
    assert.deepEqual(sent, JSON.parse(JSON.stringify(crd)), crd.metadata.name);
  }
});
