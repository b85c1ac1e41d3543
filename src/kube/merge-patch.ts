/**
 * JSON merge patch (RFC 7386) between two JSON values: applying the result to `before` yields
 * `after`. Objects are diffed key by key (removed keys become `null`); arrays and scalars are
 * replaced whole, which is what merge patch can express. Returns undefined when nothing changed.
 * Pure; `before`/`after` must be JSON data (no undefined inside arrays, no functions).
 */
export function createMergePatch(before: unknown, after: unknown): Record<string, unknown> | undefined {
  if (!isPlainObject(before) || !isPlainObject(after)) {
    throw new TypeError("Cannot create merge patch: both sides must be objects");
  }
  return diffObjects(before, after);
}

function diffObjects(before: Record<string, unknown>, after: Record<string, unknown>): Record<string, unknown> | undefined {
  const patch: Record<string, unknown> = {};
  for (const key of Object.keys(before)) {
    if (before[key] !== undefined && (!(key in after) || after[key] === undefined)) patch[key] = null;
  }
  for (const [key, value] of Object.entries(after)) {
    if (value === undefined) continue;
    const old = before[key];
    if (isPlainObject(old) && isPlainObject(value)) {
      const nested = diffObjects(old, value);
      if (nested !== undefined) patch[key] = nested;
    } else if (!jsonEqual(old, value)) {
      patch[key] = value;
    }
  }
  return Object.keys(patch).length === 0 ? undefined : patch;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Structural equality of JSON values. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  if (isPlainObject(a) && isPlainObject(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const key of keys) if (!jsonEqual(a[key], b[key])) return false;
    return true;
  }
  return false;
}

/** Applies a JSON merge patch (RFC 7386) to `target`, returning a new value. Pure. */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (!isPlainObject(patch)) return patch;
  const result: Record<string, unknown> = isPlainObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = applyMergePatch(result[key], value);
  }
  return result;
}
