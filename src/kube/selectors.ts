import { terminalError } from "../shared/index.ts";

/**
 * Label and field selectors as the API server parses and matches them, for `FakeResourceClient`
 * (the real client just forwards the strings). Written here because no maintained npm package
 * implements Kubernetes' selector grammar, and it is small: comma-separated requirements, each
 * `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)` or `key notin (a,b)` for labels, and
 * `field=v`, `field==v`, `field!=v` for fields. Not modelled: the numeric `key>n`/`key<n` label
 * operators and backslash escapes in field values (both refused as BadRequest).
 */
export type LabelRequirement =
  | { readonly op: "exists" | "notExists"; readonly key: string }
  | { readonly op: "in" | "notIn"; readonly key: string; readonly values: readonly string[] };

export interface FieldRequirement {
  readonly field: string;
  readonly op: "=" | "!=";
  readonly value: string;
}

const NAME = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const badSelector = (kind: string, selector: string, why: string): Error =>
  terminalError("BadRequest", `Cannot parse ${kind} selector "${selector}": ${why}`);

function validKey(key: string): boolean {
  const slash = key.indexOf("/");
  if (slash < 0) return NAME.test(key);
  const prefix = key.slice(0, slash);
  return prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix) && NAME.test(key.slice(slash + 1));
}
const validValue = (value: string): boolean => value === "" || NAME.test(value);

/** Splits on commas that are not inside parentheses. */
function splitTopLevel(selector: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of selector) {
    if (ch === "(") depth += 1;
    if (ch === ")") depth -= 1;
    if (ch === "," && depth === 0) {
      parts.push(current);
      current = "";
    } else current += ch;
  }
  parts.push(current);
  return parts.map((p) => p.trim());
}

/** Parses a label selector; throws a terminal `BadRequest` (the API server's 400) if malformed. */
export function parseLabelSelector(selector: string): LabelRequirement[] {
  if (selector.trim() === "") return [];
  return splitTopLevel(selector).map((part): LabelRequirement => {
    const set = /^(\S+)\s+(in|notin)\s*\((.*)\)$/.exec(part);
    if (set !== null) {
      const [, key = "", op, list = ""] = set;
      const values = list.split(",").map((v) => v.trim());
      if (!validKey(key) || values.some((v) => !validValue(v))) throw badSelector("label", selector, `invalid requirement "${part}"`);
      return { op: op === "in" ? "in" : "notIn", key, values };
    }
    const equality = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(part);
    if (equality !== null) {
      const [, key = "", op, value = ""] = equality;
      if (!validKey(key) || !validValue(value)) throw badSelector("label", selector, `invalid requirement "${part}"`);
      return { op: op === "!=" ? "notIn" : "in", key, values: [value] };
    }
    const exists = /^(!?)\s*([^=!\s()]+)$/.exec(part);
    if (exists !== null && validKey(exists[2] ?? "")) return { op: exists[1] === "!" ? "notExists" : "exists", key: exists[2] ?? "" };
    throw badSelector("label", selector, `invalid requirement "${part}"`);
  });
}

/** Whether `labels` satisfy every requirement (`!=`/`notin` also match objects without the label). */
export function matchesLabels(requirements: readonly LabelRequirement[], labels: Readonly<Record<string, string>> | undefined): boolean {
  return requirements.every((r) => {
    const value = labels?.[r.key];
    switch (r.op) {
      case "exists":
        return value !== undefined;
      case "notExists":
        return value === undefined;
      case "in":
        return value !== undefined && r.values.includes(value);
      case "notIn":
        return value === undefined || !r.values.includes(value);
    }
  });
}

/** Parses a field selector; throws a terminal `BadRequest` if malformed or a field is not in `supported`. */
export function parseFieldSelector(selector: string, supported: ReadonlySet<string>): FieldRequirement[] {
  if (selector.trim() === "") return [];
  return splitTopLevel(selector).map((part) => {
    const match = /^([^=!\s]+)\s*(==|=|!=)\s*(.*)$/.exec(part);
    if (match === null || (match[3] ?? "").includes("\\")) throw badSelector("field", selector, `invalid requirement "${part}"`);
    const [, field = "", op, value = ""] = match;
    if (!supported.has(field)) throw terminalError("BadRequest", `Cannot list with field selector "${selector}": field label not supported: ${field}`);
    return { field, op: op === "!=" ? "!=" : "=", value };
  });
}

/** Whether the object's field values (absent = "") satisfy every requirement. */
export function matchesFields(requirements: readonly FieldRequirement[], valueOf: (field: string) => string | undefined): boolean {
  return requirements.every((r) => ((valueOf(r.field) ?? "") === r.value) === (r.op === "="));
}

