/**
 * The lost acknowledgement, made deterministic by the fault point agent.exec-sent: the guest holds
 * the Exec (it answered), the agent does not act on the answer; it must ask the guest for the exec's
 * state over a fresh channel and never send the Exec again.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FaultPoints, parseFaultPlan, silentLogger } from "../../shared/index.ts";
import type { ExecReply, ExecRequest, ExecStatusReply, GuestClient } from "../guest/index.ts";
import { handOffExec, workloadExecId } from "./exec-handoff.ts";

/** A guest that runs whatever it is sent; it counts what it received. */
function fakeGuest(): { client: GuestClient; execs: ExecRequest[]; statusAsks: string[] } {
  const execs: ExecRequest[] = [];
  const statusAsks: string[] = [];
  const client = {
    exec: (request: ExecRequest): Promise<ExecReply> => {
      execs.push(request);
      return Promise.resolve({ v: 1, type: "exec", id: execs.length, started: true, execId: request.execId, state: "running", pid: 42 } as ExecReply);
    },
    execStatus: (execId: string): Promise<ExecStatusReply> => {
      statusAsks.push(execId);
      return Promise.resolve({ v: 1, type: "exec.status", id: 99, execId, state: execs.some((e) => e.execId === execId) ? "running" : "failed" } as ExecStatusReply);
    },
    close: () => undefined,
  } as unknown as GuestClient;
  return { client, execs, statusAsks };
}

const request: ExecRequest = { execId: workloadExecId("u-1"), argv: ["/runner/run.sh"], env: { IMP_RUNNER_SETUP: "secret" } } as unknown as ExecRequest;

describe("handOffExec at fault point agent.exec-sent", () => {
  for (const plan of ["agent.exec-sent=fail", "agent.exec-sent=hang"]) {
    it(`${plan}: the acknowledgement is lost, the guest is asked, the Exec is never resent`, async () => {
      const guest = fakeGuest();
      const faults = new FaultPoints(parseFaultPlan(plan));
      const order: string[] = [];
      let reconnects = 0;
      const result = await handOffExec(request, {
        client: guest.client,
        reconnect: () => {
          reconnects++;
          order.push("reconnect");
          return Promise.resolve(guest.client);
        },
        recordSent: () => {
          order.push("recordSent");
          return Promise.resolve();
        },
        logger: silentLogger,
        // Bounds the hang like a reply that never comes.
        requestTimeoutMs: 200,
        faults,
      });
      assert.equal(result.delivered, true);
      assert.ok(result.delivered && result.state === "running" && !result.startedByThisCall, "known from the guest's state, not from the lost reply");
      assert.equal(guest.execs.length, 1, "exactly one Exec reached the guest");
      assert.deepEqual(guest.statusAsks, [request.execId]);
      assert.deepEqual(order, ["recordSent", "reconnect"]);
      assert.equal(reconnects, 1);
      assert.equal(faults.hits("agent.exec-sent"), 1);
    });
  }

  it("unarmed: the point is passed once and the reply is used as is", async () => {
    const guest = fakeGuest();
    const faults = new FaultPoints();
    const result = await handOffExec(request, { client: guest.client, reconnect: () => Promise.reject(new Error("no reconnect expected")), recordSent: () => Promise.resolve(), logger: silentLogger, requestTimeoutMs: 1_000, faults });
    assert.ok(result.delivered && result.startedByThisCall);
    assert.equal(faults.hits("agent.exec-sent"), 1);
    assert.deepEqual(guest.statusAsks, []);
  });
});
