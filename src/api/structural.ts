/**
 * Turns a TypeBox schema into a Kubernetes structural schema and checks the structural rules
 * before the API server does, so a mistake fails `npm run gen:crds` with a path instead of a CRD
 * that is silently pruned or rejected at install time.
 *
 * Rules enforced (apiextensions.k8s.io/v1, "Specifying a structural schema"): every node has a
 * `type` (or `x-kubernetes-int-or-string` / `x-kubernetes-preserve-unknown-fields`); no `$ref`;
 * objects do not mix `properties` with `additionalProperties`; arrays have `items`; no
 * `uniqueItems: true`; only keywords the CRD schema type (JSONSchemaProps) knows.
 */

/** A JSON schema node as the CRD carries it. */
export type JsonSchema = { [key: string]: unknown };

/** Keywords JSONSchemaProps accepts (besides `x-kubernetes-*`). */
const K8S_KEYWORDS = new Set([
  "description", "type", "format", "title", "default", "nullable", "enum",
  "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "multipleOf",
  "maxLength", "minLength", "pattern",
  "maxItems", "minItems", "uniqueItems", "items",
  "maxProperties", "minProperties", "required", "properties", "additionalProperties",
  "allOf", "anyOf", "oneOf", "not", "example", "externalDocs",
]);

/** Keywords TypeBox or JSON Schema tooling may add that carry no meaning for Kubernetes; dropped. */
const DROPPED_KEYWORDS = new Set(["$id", "$schema", "$comment", "examples"]);

const TYPES = new Set(["object", "array", "string", "integer", "number", "boolean"]);

/** Where in the schema something went wrong, in the style of a JSON path. */
export class SchemaError extends Error {
  override readonly name = "SchemaError";
  readonly path: string;
  constructor(path: string, problem: string) {
    super(`Cannot convert schema at ${path}: ${problem}`);
    this.path = path;
  }
}

const isRecord = (v: unknown): v is JsonSchema => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Returns a plain-JSON copy of `schema` with TypeBox's symbol keys (`[Kind]`, `[OptionalKind]`) and
 * non-Kubernetes keywords removed. Throws `SchemaError` on a keyword Kubernetes does not know
 * (`$ref`, `const`, `patternProperties`, …) rather than dropping meaning silently.
 */
export function toK8sSchema(schema: unknown, path = "$"): JsonSchema {
  // A JSON round trip drops symbol keys and functions, and deep-copies so callers never alias TypeBox objects.
  const plain: unknown = JSON.parse(JSON.stringify(schema));
  return clean(plain, path);
}

/** `anyOf: [{const: "a", type: "string"}, …]` (TypeBox's union of string literals) as `type: string, enum: [a, …]`. */
function literalUnionToEnum(node: JsonSchema): JsonSchema {
  if (typeof node["const"] === "string") {
    // A union of one literal is the literal itself.
    const { const: value, ...rest } = node;
    return { ...rest, type: "string", enum: [value] };
  }
  const anyOf = node["anyOf"];
  if (!Array.isArray(anyOf) || anyOf.length === 0) return node;
  const isStringConst = (s: unknown): boolean => isRecord(s) && typeof s["const"] === "string" && Object.keys(s).every((k) => k === "const" || k === "type");
  if (!anyOf.every(isStringConst)) return node;
  const { anyOf: _dropped, ...rest } = node;
  return { ...rest, type: "string", enum: anyOf.map((s) => (s as JsonSchema)["const"]) };
}

function clean(input: unknown, path: string): JsonSchema {
  if (!isRecord(input)) throw new SchemaError(path, "not a schema object");
  const node = literalUnionToEnum(input);
  const out: JsonSchema = {};
  for (const [key, value] of Object.entries(node)) {
    if (DROPPED_KEYWORDS.has(key)) continue;
    if (!K8S_KEYWORDS.has(key) && !key.startsWith("x-kubernetes-")) {
      throw new SchemaError(path, `keyword "${key}" is not allowed in a CRD schema`);
    }
    if (key === "required") {
      // A defaulted field is filled in by the API server, so clients need not send it. TypeScript
      // types keep it required: they describe objects as read back, defaults applied.
      const props = isRecord(node["properties"]) ? node["properties"] : {};
      const required = Array.isArray(value) ? value.filter((name) => !(isRecord(props[String(name)]) && "default" in (props[String(name)] as JsonSchema))) : value;
      if (Array.isArray(required) && required.length === 0) continue;
      out[key] = required;
    } else if (key === "properties") {
      if (!isRecord(value)) throw new SchemaError(path, "properties must be an object");
      out[key] = Object.fromEntries(Object.entries(value).map(([name, sub]) => [name, clean(sub, `${path}.${name}`)]));
    } else if (key === "items" || (key === "additionalProperties" && isRecord(value)) || key === "not") {
      out[key] = clean(value, `${path}.${key === "items" ? "items" : key}`);
    } else if (key === "allOf" || key === "anyOf" || key === "oneOf") {
      if (!Array.isArray(value)) throw new SchemaError(path, `${key} must be a list`);
      out[key] = value.map((sub, i) => clean(sub, `${path}.${key}[${i}]`));
    } else {
      out[key] = value;
    }
  }
  return out;
}

/**
 * Checks the structural-schema rules on a converted schema and returns every violation (empty when
 * the schema is structural). `path` names the root in messages.
 */
export function structuralViolations(schema: JsonSchema, path = "$"): string[] {
  const problems: string[] = [];
  visit(schema, path, problems, false);
  return problems;
}

function visit(node: JsonSchema, path: string, problems: string[], inJunction: boolean): void {
  const type = node["type"];
  const intOrString = node["x-kubernetes-int-or-string"] === true;
  const preserve = node["x-kubernetes-preserve-unknown-fields"] === true;
  if ("$ref" in node) problems.push(`${path}: $ref is not allowed`);
  if (!inJunction) {
    if (type === undefined && !intOrString && !preserve) problems.push(`${path}: type is required`);
    if (type !== undefined && (typeof type !== "string" || !TYPES.has(type))) problems.push(`${path}: unknown type ${String(type)}`);
  }
  if (node["uniqueItems"] === true) problems.push(`${path}: uniqueItems: true is not allowed`);
  if ("properties" in node && "additionalProperties" in node) {
    problems.push(`${path}: properties and additionalProperties are mutually exclusive`);
  }
  if (type === "array" && !isRecord(node["items"])) problems.push(`${path}: array needs items`);
  if (node["x-kubernetes-list-type"] === "map") {
    const keys = node["x-kubernetes-list-map-keys"];
    const items = node["items"];
    const required = isRecord(items) && Array.isArray(items["required"]) ? (items["required"] as unknown[]) : [];
    if (!Array.isArray(keys) || keys.length === 0) problems.push(`${path}: list-type map needs x-kubernetes-list-map-keys`);
    else for (const k of keys) if (!required.includes(k)) problems.push(`${path}: list map key ${String(k)} must be required in items`);
  }
  const required = node["required"];
  const props = node["properties"];
  if (Array.isArray(required)) {
    for (const r of required) if (!isRecord(props) || !(String(r) in props)) problems.push(`${path}: required field ${String(r)} is not a property`);
  }
  if (isRecord(props)) for (const [name, sub] of Object.entries(props)) if (isRecord(sub)) visit(sub, `${path}.${name}`, problems, inJunction);
  if (isRecord(node["items"])) visit(node["items"], `${path}[*]`, problems, inJunction);
  if (isRecord(node["additionalProperties"])) visit(node["additionalProperties"], `${path}.*`, problems, inJunction);
  for (const junction of ["allOf", "anyOf", "oneOf"] as const) {
    const list = node[junction];
    if (Array.isArray(list)) list.forEach((sub, i) => { if (isRecord(sub)) visit(sub, `${path}.${junction}[${i}]`, problems, true); });
  }
  if (isRecord(node["not"])) visit(node["not"], `${path}.not`, problems, true);
}
