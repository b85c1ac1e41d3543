import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Type } from "@sinclair/typebox";
import { buildAllCrds, SchemaError, StringEnum, structuralViolations, toK8sSchema, type JsonSchema } from "./index.ts";

describe("toK8sSchema()", () => {
  test("toK8sSchema() drops TypeBox symbols and $id but keeps Kubernetes extensions", () => {
    const schema = Type.Object(
      { a: Type.Optional(Type.Integer({ minimum: 1 })), b: Type.String({ maxLength: 3 }) },
      { $id: "X", "x-kubernetes-validations": [{ rule: "true", message: "m" }] },
    );
    const out = toK8sSchema(schema);
    assert.deepEqual(out, {
      "x-kubernetes-validations": [{ rule: "true", message: "m" }],
      type: "object",
      required: ["b"],
      properties: { a: { minimum: 1, type: "integer" }, b: { maxLength: 3, type: "string" } },
    });
    assert.equal(Object.getOwnPropertySymbols(out).length, 0);
  });

  test("toK8sSchema() turns a union of string literals into an enum", () => {
    assert.deepEqual(toK8sSchema(StringEnum(["a", "b"], { default: "a" })), { default: "a", type: "string", enum: ["a", "b"] });
    assert.deepEqual(toK8sSchema(StringEnum(["only"])), { type: "string", enum: ["only"] });
  });

  test("toK8sSchema() leaves defaulted fields out of required", () => {
    const out = toK8sSchema(Type.Object({ a: Type.String({ default: "x" }), b: Type.String() }));
    assert.deepEqual(out["required"], ["b"]);
    const none = toK8sSchema(Type.Object({ a: Type.String({ default: "x" }) }));
    assert.equal("required" in none, false);
  });

  test("toK8sSchema() rejects keywords a CRD cannot carry, naming the path", () => {
    assert.throws(() => toK8sSchema(Type.Object({ a: Type.Literal(3) })), (err: unknown) => err instanceof SchemaError && err.path === "$.a" && /const/.test(err.message));
    assert.throws(() => toK8sSchema(Type.Record(Type.String(), Type.String())), /patternProperties/);
    assert.throws(() => toK8sSchema({ type: "object", properties: { a: { $ref: "#/x" } } }), /\$ref/);
  });
});

describe("structuralViolations()", () => {
  const cases: [string, JsonSchema, RegExp][] = [
    ["a node without type", { type: "object", properties: { a: { description: "x" } } }, /\$\.a: type is required/],
    ["properties mixed with additionalProperties", { type: "object", properties: { a: { type: "string" } }, additionalProperties: { type: "string" } }, /mutually exclusive/],
    ["an array without items", { type: "array" }, /array needs items/],
    ["uniqueItems", { type: "array", items: { type: "string" }, uniqueItems: true }, /uniqueItems/],
    ["a list map whose key is optional", { type: "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], items: { type: "object", properties: { name: { type: "string" } } } }, /name must be required/],
    ["a required field that is not a property", { type: "object", required: ["b"], properties: { a: { type: "string" } } }, /required field b/],
  ];
  for (const [what, schema, expected] of cases) {
    test(`structuralViolations() reports ${what}`, () => {
      const problems = structuralViolations(schema);
      assert.ok(problems.some((p) => expected.test(p)), problems.join("; "));
    });
  }

  test("structuralViolations() accepts int-or-string and preserve-unknown-fields nodes without type", () => {
    assert.deepEqual(structuralViolations({ type: "object", properties: { a: { "x-kubernetes-int-or-string": true }, b: { "x-kubernetes-preserve-unknown-fields": true } } }), []);
  });
});

describe("generated CRDs", () => {
  const crds = buildAllCrds();

  test("every Imp CRD is structural", () => {
    for (const crd of crds) assert.deepEqual(structuralViolations(crd.spec.versions[0]!.schema.openAPIV3Schema), [], crd.metadata.name);
  });

  test("every string has maxLength, enum or format and every list maxItems, so CEL cost stays bounded", () => {
    const unbounded: string[] = [];
    const walk = (node: JsonSchema, path: string): void => {
      if (node["type"] === "string" && !("maxLength" in node || "enum" in node || "format" in node)) unbounded.push(path);
      if (node["type"] === "array" && !("maxItems" in node)) unbounded.push(path);
      const props = node["properties"] as Record<string, JsonSchema> | undefined;
      for (const [k, v] of Object.entries(props ?? {})) walk(v, `${path}.${k}`);
      if (node["items"] !== undefined) walk(node["items"] as JsonSchema, `${path}[*]`);
      if (typeof node["additionalProperties"] === "object") walk(node["additionalProperties"] as JsonSchema, `${path}.*`);
    };
    for (const crd of crds) {
      const props = crd.spec.versions[0]!.schema.openAPIV3Schema["properties"] as Record<string, JsonSchema>;
      for (const part of ["spec", "status"]) if (props[part] !== undefined) walk(props[part], `${crd.spec.names.kind}.${part}`);
    }
    assert.deepEqual(unbounded, []);
  });

  test("every field of spec and status has a description, so `kubectl explain` answers for each", () => {
    const silent: string[] = [];
    // A field is a property; a list's or map's elements are explained by their field, their own fields are fields.
    const walk = (node: JsonSchema, path: string, isField: boolean): void => {
      if (isField && (typeof node["description"] !== "string" || node["description"].trim() === "")) silent.push(path);
      const props = node["properties"] as Record<string, JsonSchema> | undefined;
      for (const [k, v] of Object.entries(props ?? {})) walk(v, `${path}.${k}`, true);
      if (node["items"] !== undefined) walk(node["items"] as JsonSchema, `${path}[*]`, false);
      if (typeof node["additionalProperties"] === "object") walk(node["additionalProperties"] as JsonSchema, `${path}.*`, false);
    };
    for (const crd of crds) {
      const props = crd.spec.versions[0]!.schema.openAPIV3Schema["properties"] as Record<string, JsonSchema>;
      for (const part of ["spec", "status"]) if (props[part] !== undefined) walk(props[part], `${crd.spec.names.kind}.${part}`, true);
    }
    assert.deepEqual(silent, []);
  });

  test("every kind has the imp category, a short name, and a status subresource exactly when it has a status", () => {
    for (const crd of crds) {
      const v = crd.spec.versions[0]!;
      assert.deepEqual(crd.spec.names.categories, ["imp"]);
      assert.equal(crd.spec.names.shortNames.length, 1);
      const props = v.schema.openAPIV3Schema["properties"] as Record<string, unknown>;
      assert.equal(v.subresources !== undefined, props["status"] !== undefined, crd.metadata.name);
    }
  });
});
