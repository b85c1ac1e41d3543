/**
 * Cached objects are shared by every reader of an informer, so a reconciler that edits one in place
 * corrupts what all others see and diffs against. `DeepReadonly` makes that a compile error;
 * `deepFreeze` makes it a runtime `TypeError` (ESM code is strict mode), for code that casts the
 * type away. Freezing is done always, not only in tests: the walk costs about what parsing the
 * object did, and a thrown TypeError (a failed, logged, retried reconcile) is far easier to find
 * than a cache that silently disagrees with the API server. To change an object, edit a
 * `structuredClone` of it (the copy is not frozen), or use `mutateWithRetry`.
 */
export type DeepReadonly<T> = T extends (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends readonly (infer U)[]
    ? readonly DeepReadonly<U>[]
    : T extends (...args: never[]) => unknown
      ? T
      : T extends object
        ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
        : T;

/** Freezes `value` and everything reachable from it; returns it, typed read-only. */
export function deepFreeze<T>(value: T): DeepReadonly<T> {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value as DeepReadonly<T>;
}
