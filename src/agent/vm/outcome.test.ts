import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { VmExit } from "../vmm/index.ts";
import { explainVmmDeath, outcomeAfterTheFact, vmmDeathCause } from "./outcome.ts";

const killed: VmExit = { code: null, signal: "SIGKILL" };
const MiB = 1024 * 1024;
const vmmExited = { succeeded: false, reason: "VmmExited", message: "QEMU exited (signal SIGKILL)" } as const;

describe("why a VMM died", () => {
  it("an OOM kill in the VM's cgroup ends the VM OOMKilled, with the limit and the peak", () => {
    const outcome = explainVmmDeath(vmmExited, { ...killed, memory: { oomKilled: true, peakBytes: 640 * MiB, limitBytes: 640 * MiB } });
    assert.equal(outcome.reason, "OOMKilled");
    assert.match(outcome.message, /limit 640 MiB .* peak 640 MiB/);
  });

  it("a console past its bound, killed by the supervisor, ends the VM GuestMisbehaved and says so", () => {
    const outcome = explainVmmDeath(vmmExited, { ...killed, memory: { oomKilled: false }, fileBound: { path: "/s/serial.log", bytes: 17 * MiB, maxBytes: 16 * MiB } });
    assert.equal(outcome.reason, "GuestMisbehaved");
    // Worded as the agent's own stop of a flooding VM, so a reader (or a test) sees one kind of end.
    assert.match(outcome.message, /wrote 17825792 bytes to the serial console, over the 16777216-byte limit .* supervisor killed the VMM; the last lines are in \/s\/serial\.log/);
  });

  it("a plain death, or an outcome the workload decided, stands as it is", () => {
    assert.equal(vmmDeathCause(killed), undefined);
    assert.deepEqual(explainVmmDeath(vmmExited, killed), vmmExited);
    const exited = { succeeded: false, reason: "ExitNonZero", message: "exit 3", exitCode: 3 } as const;
    assert.deepEqual(explainVmmDeath(exited, { ...killed, fileBound: { path: "/s", bytes: 2, maxBytes: 1 } }), exited);
  });

  it("while no agent watched: the flood is told, with when", () => {
    const outcome = outcomeAfterTheFact(undefined, { ...killed, fileBound: { path: "/s/serial.log", bytes: 17 * MiB, maxBytes: 16 * MiB } }, "adopted after a restart");
    assert.equal(outcome.reason, "GuestMisbehaved");
    assert.match(outcome.message, /supervisor killed the VMM.*\(while no agent watched the VM\)/);
  });
});
