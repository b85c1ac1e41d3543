/**
 * Pure rules for the names inside a layer tar: what a name means (a path, a whiteout, an opaque
 * marker) and which names are refused before anything touches the disk. Nothing here does I/O.
 *
 * A name is refused when it is absolute, contains a `..` component, a NUL byte, a component longer
 * than 255 bytes or is longer than 4095 bytes in all (Linux NAME_MAX / PATH_MAX). Refusing `..`
 * outright, instead of resolving it lexically, keeps the rule simple to audit: layer producers
 * (Docker, BuildKit, umoci) never emit it.
 */
import { terminalError } from "../../../shared/index.ts";

export const MAX_COMPONENT_BYTES = 255;
export const MAX_PATH_BYTES = 4095;
export const WHITEOUT_PREFIX = ".wh.";
export const OPAQUE_MARKER = ".wh..wh..opq";

/** A validated relative path inside the target: components without `.`, `..` or empty parts. `[]` is the root. */
export type EntryPath = readonly string[];

/** What a tar name asks for once its whiteout prefix (if any) is understood. */
export type EntryMeaning =
  | { readonly kind: "path"; readonly path: EntryPath }
  | { readonly kind: "whiteout"; readonly path: EntryPath }
  | { readonly kind: "opaque"; readonly dir: EntryPath }
  /** AUFS bookkeeping (`.wh..wh.plnk`, `.wh..wh.aufs`): carries no filesystem content; skipped. */
  | { readonly kind: "ignored" };

/**
 * Splits a tar entry name into validated components. `./a//b/` → `["a","b"]`; `.` and `./` → `[]`.
 * Throws a terminal `UnsafeLayerPath` error for absolute names, `..`, NUL and over-long names.
 */
export function parseEntryPath(name: string, what = "entry"): EntryPath {
  if (name.includes("\0")) throw unsafe(name, what, "it contains a NUL byte");
  if (Buffer.byteLength(name) > MAX_PATH_BYTES) throw unsafe(name, what, `it is longer than ${MAX_PATH_BYTES} bytes`);
  if (name.startsWith("/")) throw unsafe(name, what, "it is an absolute path");
  const parts: string[] = [];
  for (const part of name.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") throw unsafe(name, what, "it contains a '..' component");
    if (Buffer.byteLength(part) > MAX_COMPONENT_BYTES) throw unsafe(name, what, `a component is longer than ${MAX_COMPONENT_BYTES} bytes`);
    parts.push(part);
  }
  return parts;
}

/** Interprets a tar entry name with the OCI whiteout conventions (image-spec layer.md, "Whiteouts"). */
export function entryMeaning(name: string): EntryMeaning {
  const path = parseEntryPath(name);
  const base = path[path.length - 1];
  if (base === undefined || !base.startsWith(WHITEOUT_PREFIX)) return { kind: "path", path };
  const dir = path.slice(0, -1);
  if (base === OPAQUE_MARKER) return { kind: "opaque", dir };
  if (base.startsWith(`${WHITEOUT_PREFIX}${WHITEOUT_PREFIX}`)) return { kind: "ignored" };
  const hidden = base.slice(WHITEOUT_PREFIX.length);
  if (hidden === "" || hidden === "." || hidden === "..") throw unsafe(name, "whiteout", `it names '${hidden}'`);
  return { kind: "whiteout", path: [...dir, hidden] };
}

/** The path as a string relative to the target root (`""` for the root). */
export const pathKey = (path: EntryPath): string => path.join("/");

/** True when `key` is `ancestor` itself or lies below it (`ancestor` `""` is the root, above everything). */
export function isAtOrBelow(key: string, ancestor: string): boolean {
  return ancestor === "" || key === ancestor || key.startsWith(`${ancestor}/`);
}

function unsafe(name: string, what: string, why: string): Error {
  const shown = name.length > 200 ? `${name.slice(0, 200)}…` : name;
  return terminalError("UnsafeLayerPath", `Cannot apply layer ${what} ${JSON.stringify(shown)}: ${why}`, {
    context: { name: shown },
  });
}
