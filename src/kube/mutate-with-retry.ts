import { retry, systemClock, type BackoffPolicy, type Clock, type Logger } from "../shared/index.ts";
import { isConflict } from "./api-errors.ts";
import { createMergePatch } from "./merge-patch.ts";
import type { DeepReadonly } from "./deep-readonly.ts";
import type { KubeObject, Stored } from "./resource.ts";
import type { ObjectRef, ResourceClient } from "./resource-client.ts";

/**
 * Conflict retries: short and spread out (full jitter), because the competing writer has just
 * finished. This is the only layer that retries a conflict at once (the controller backs off a
 * conflict that escapes it), so one conflict costs one more GET + PATCH, and a persistently hot
 * object at most 5 pairs before the key's backoff takes over.
 */
export const CONFLICT_RETRY: BackoffPolicy = { baseMs: 20, factor: 2, capMs: 1_000, jitter: 1, maxAttempts: 5 };

export interface MutateRequest<T extends KubeObject> {
  readonly ref: ObjectRef;
  /** Edits the draft (a deep copy of the freshest object); returning false skips the write. Pure: it may run several times. */
  readonly mutate: (draft: Stored<T>) => void | boolean;
  /** `status` writes through the status subresource and only the status part of the change. */
  readonly subresource?: "main" | "status";
  readonly policy?: BackoffPolicy;
  readonly clock?: Clock;
  readonly signal?: AbortSignal;
  readonly logger?: Logger;
  /**
   * A copy already at hand (the informer's) to try first instead of a GET: its resourceVersion
   * rides on the patch, so a stale copy costs a 409 and the retries then read the object fresh.
   * Worth it where the cache is nearly always current (a controller writing what it just saw). A
   * write `mutate` skips on it is decided on that copy, unchecked by the server, and that copy is
   * what is returned: pass `from` only where the caller has just decided, on the same copy, that
   * it will write.
   */
  readonly from?: Stored<T> | DeepReadonly<Stored<T>> | undefined;
}

/**
 * Read-modify-write without lost updates: reads the object (or starts from `from`), lets `mutate` edit a deep
 * copy, and sends the difference as a merge patch that carries the read `resourceVersion`, so a
 * concurrent write makes the apiserver answer 409 instead of silently losing one of them. On a
 * conflict it re-reads and re-applies `mutate` (which must therefore be a pure function of the
 * object), up to the policy's attempts; the last conflict is then thrown (class `conflict`).
 * `mutate` returning false, or changing nothing, skips the write. Returns the object as stored.
 */
export async function mutateWithRetry<T extends KubeObject>(
  client: Pick<ResourceClient<T>, "get" | "patch" | "patchStatus">,
  request: MutateRequest<T>,
): Promise<Stored<T>> {
  const { ref, mutate, from, ...options } = request;
  const subresource = options.subresource ?? "main";
  return retry(
    async (attempt) => {
      // A cached copy is only read here: the draft is a deep copy, and it is returned only when nothing was written.
      const current = attempt === 1 && from?.metadata?.resourceVersion !== undefined ? (from as Stored<T>) : await client.get(ref, options.signal);
      const draft = structuredClone(current);
      if (mutate(draft) === false) return current;
      const diff =
        subresource === "status"
          ? createMergePatch({ status: statusOf(current) }, { status: statusOf(draft) })
          : createMergePatch(current, draft);
      if (diff === undefined) return current;
      const metadata = { ...(diff["metadata"] as Record<string, unknown> | undefined), resourceVersion: current.metadata?.resourceVersion };
      const patch = { ...diff, metadata };
      if (attempt > 1) options.logger?.debug({ attempt }, "retrying write after a conflict");
      return subresource === "status" ? client.patchStatus(ref, patch, options.signal) : client.patch(ref, patch, options.signal);
    },
    {
      policy: options.policy ?? CONFLICT_RETRY,
      clock: options.clock ?? systemClock,
      isRetryable: isConflict,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    },
  );
}

function statusOf(obj: KubeObject): unknown {
  return (obj as { status?: unknown }).status ?? {};
}
