/**
 * Finalizers, the one place that reads and edits `metadata.finalizers`. Adding one is a
 * read-modify-write with the read resourceVersion (mutateWithRetry): a merge patch of the whole
 * list would otherwise drop a finalizer another controller added in between. Removing one from an
 * object already gone is done (the API server deleted it once the list emptied).
 */
import { isNotFound } from "./api-errors.ts";
import { mutateWithRetry } from "./mutate-with-retry.ts";
import type { KubeObject } from "./resource.ts";
import type { ObjectRef, ResourceClient } from "./resource-client.ts";

type FinalizerClient<T extends KubeObject> = Pick<ResourceClient<T>, "get" | "patch" | "patchStatus">;

export function hasFinalizer(obj: { readonly metadata?: { readonly finalizers?: readonly string[] } }, finalizer: string): boolean {
  return (obj.metadata?.finalizers ?? []).includes(finalizer);
}

/**
 * Adds `finalizer` unless the object has it or is being deleted (the API server refuses new
 * finalizers then). Returns the object as stored.
 */
export async function addFinalizer<T extends KubeObject>(client: FinalizerClient<T>, ref: ObjectRef, finalizer: string, signal?: AbortSignal): Promise<T> {
  return mutateWithRetry(client, {
    ref,
    ...(signal === undefined ? {} : { signal }),
    mutate: (draft) => {
      const meta = draft.metadata ?? {};
      if (meta.deletionTimestamp !== undefined || hasFinalizer(draft, finalizer)) return false;
      draft.metadata = { ...meta, finalizers: [...(meta.finalizers ?? []), finalizer] };
    },
  });
}

/**
 * Removes `finalizer`; an object without it, or already gone, is done. `onlyIf` is checked on the
 * object as read for the write (again on each conflict retry): false leaves it. Returns whether this
 * call removed it.
 */
export async function removeFinalizer<T extends KubeObject>(client: FinalizerClient<T>, ref: ObjectRef, finalizer: string, signal?: AbortSignal, onlyIf?: (current: T) => boolean): Promise<boolean> {
  let removed = false;
  try {
    await mutateWithRetry(client, {
      ref,
      ...(signal === undefined ? {} : { signal }),
      mutate: (draft) => {
        removed = false;
        const meta = draft.metadata ?? {};
        if (!hasFinalizer(draft, finalizer) || (onlyIf !== undefined && !onlyIf(draft))) return false;
        draft.metadata = { ...meta, finalizers: (meta.finalizers ?? []).filter((f) => f !== finalizer) };
        removed = true;
      },
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  return removed;
}
