/**
 * Builds a value that satisfies a (dereferenced) OpenAPI 3.0 schema from its required fields:
 * nullable → null, enum → its first value, uri → a github.invalid URL, date-time → now. The test
 * server uses it for the parts of a webhook Imp does not read (a full `repository`, `sender`), so
 * its deliveries have the documented shape and the payload checks can be strict.
 */
type Schema = {
  type?: string;
  format?: string;
  nullable?: boolean;
  enum?: unknown[];
  required?: string[];
  properties?: Record<string, Schema>;
  items?: Schema;
  allOf?: Schema[];
  anyOf?: Schema[];
  oneOf?: Schema[];
};

export function sampleFromSchema(schema: Schema, path = "value"): unknown {
  if (schema.allOf !== undefined) {
    const merged: Record<string, unknown> = {};
    for (const part of schema.allOf) Object.assign(merged, sampleFromSchema(part, path));
    return merged;
  }
  const alternative = schema.oneOf?.[0] ?? schema.anyOf?.[0];
  if (alternative !== undefined) return sampleFromSchema(alternative, path);
  if (schema.nullable === true) return null;
  if (schema.enum !== undefined) return schema.enum.find((v) => v !== null) ?? null;
  switch (schema.type) {
    case "object": {
      const out: Record<string, unknown> = {};
      for (const key of schema.required ?? []) {
        const property = schema.properties?.[key];
        out[key] = property === undefined ? null : sampleFromSchema(property, `${path}.${key}`);
      }
      return out;
    }
    case "array":
      return [];
    case "integer":
    case "number":
      return 1;
    case "boolean":
      return false;
    case "string":
      if (schema.format === "uri" || schema.format === "uri-template") return `https://github.invalid/${path.replace(/\W+/g, "/")}`;
      if (schema.format === "date-time") return new Date().toISOString();
      if (schema.format === "email") return "octocat@github.invalid";
      return path.split(".").at(-1) ?? "x";
    default:
      return null;
  }
}
