import assert from "node:assert/strict";
import { test } from "node:test";
import type { JobMessage, WorkflowJobEvent } from "../../forge/index.ts";
import { silentLogger } from "../../shared/index.ts";
import { DemandEvents } from "./demand-events.ts";

test("every listener hears every pushed event, in order; one that throws keeps it from none of the others", () => {
  const heard: string[] = [];
  const events = new DemandEvents(silentLogger)
    .listen({ onWorkflowJob: (forge, e) => heard.push(`first ${forge} ${e.jobId}`), onScaleSetJob: () => { throw new Error("a bug in one listener"); } })
    .listen({ onWorkflowJob: () => { throw new Error("a bug in another"); } })
    .listen({ onWorkflowJob: (forge, e, audience) => heard.push(`last ${forge} ${e.jobId} ${audience === "all" ? "all" : [...audience].join(",")}`), onScaleSetJob: (pool, job) => heard.push(`last ${pool} ${job.messageType}`) });
  events.workflowJob("gitea", { jobId: 7 } as WorkflowJobEvent, new Set(["ns/p"]));
  events.scaleSetJob("ns/s", { messageType: "JobStarted" } as JobMessage);
  assert.deepEqual(heard, ["first gitea 7", "last gitea 7 ns/p", "last ns/s JobStarted"]);
});
