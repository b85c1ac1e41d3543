import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ImpNode } from "../../api/index.ts";
import { parseReservations, RESERVATIONS_ANNOTATION, reservedTotal, serializeReservations, withoutReservations, withReservation } from "./reservations.ts";

const nodeWith = (text: string | undefined): ImpNode => ({
  apiVersion: "imp.dev/v1alpha1",
  kind: "ImpNode",
  metadata: { name: "n", ...(text === undefined ? {} : { annotations: { [RESERVATIONS_ANNOTATION]: text } }) },
  spec: { unschedulable: false },
});

describe("reservation record", () => {
  it("round-trips, sorted, and totals one slot per VM", () => {
    let r = withReservation({}, "b", { namespace: "ns", name: "b", vcpu: 2, memoryMiB: 512 });
    r = withReservation(r, "a", { namespace: "ns", name: "a", vcpu: 1, memoryMiB: 256 });
    const text = serializeReservations(r);
    assert.ok(text.indexOf('"a"') < text.indexOf('"b"'));
    assert.deepEqual(parseReservations(nodeWith(text)), { ok: true, record: r });
    assert.deepEqual(reservedTotal(r), { vcpu: 3, memoryMiB: 768, vmSlots: 2 });
    assert.deepEqual(Object.keys(withoutReservations(r, ["a"])), ["b"]);
  });

  it("absent is empty; malformed is an error, never empty", () => {
    assert.deepEqual(parseReservations(nodeWith(undefined)), { ok: true, record: {} });
    for (const bad of ["[", "[]", "null", '{"u":{"namespace":"ns","name":"x","vcpu":-1,"memoryMiB":1}}', '{"u":{"name":"x","vcpu":1,"memoryMiB":1}}']) {
      assert.equal(parseReservations(nodeWith(bad)).ok, false, bad);
    }
  });
});
