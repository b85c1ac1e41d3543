/** metav1.Condition bookkeeping: lastTransitionTime moves only when the status does. */
import type { Condition } from "../../api/index.ts";

export type ConditionInput = Pick<Condition, "type" | "status" | "reason" | "message">;

export function setCondition(conditions: readonly Condition[] | undefined, next: ConditionInput, now: number, observedGeneration?: number): Condition[] {
  const list = [...(conditions ?? [])];
  const i = list.findIndex((c) => c.type === next.type);
  const old = i < 0 ? undefined : list[i];
  const condition: Condition = {
    ...next,
    lastTransitionTime: old !== undefined && old.status === next.status ? old.lastTransitionTime : new Date(now).toISOString().replace(/\.\d{3}Z$/, "Z"),
    ...(observedGeneration === undefined ? {} : { observedGeneration }),
  };
  if (i < 0) list.push(condition);
  else list[i] = condition;
  return list;
}
