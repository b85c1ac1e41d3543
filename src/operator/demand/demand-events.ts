/**
 * One fan-out for what the forges push: every verified `workflow_job` delivery (from the webhook
 * receiver) and every scale-set job message (from the listeners) goes to each listener — the
 * pools' demand, the job observer's metrics and Events — in the order they were added. A listener
 * that throws is logged and does not keep the event from the others.
 */
import type { JobMessage, WorkflowJobEvent } from "../../forge/index.ts";
import { describeError, type Logger } from "../../shared/index.ts";
import type { ForgeFamily } from "../forges/index.ts";
import type { DemandAudience } from "./webhook-demand.ts";

export interface DemandListener {
  onWorkflowJob?(forge: ForgeFamily, event: WorkflowJobEvent, audience: DemandAudience): void;
  onScaleSetJob?(poolKey: string, job: JobMessage): void;
}

export class DemandEvents {
  readonly #listeners: DemandListener[] = [];
  readonly #logger: Logger;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  listen(listener: DemandListener): this {
    this.#listeners.push(listener);
    return this;
  }

  workflowJob(forge: ForgeFamily, event: WorkflowJobEvent, audience: DemandAudience): void {
    for (const l of this.#listeners) this.#each(() => l.onWorkflowJob?.(forge, event, audience), { forge, jobId: event.jobId });
  }

  scaleSetJob(poolKey: string, job: JobMessage): void {
    for (const l of this.#listeners) this.#each(() => l.onScaleSetJob?.(poolKey, job), { pool: poolKey });
  }

  #each(deliver: () => void, context: Record<string, unknown>): void {
    try {
      deliver();
    } catch (err) {
      this.#logger.warn({ ...context, err: describeError(err) }, "a demand listener failed on an event");
    }
  }
}
