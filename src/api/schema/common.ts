/**
 * Building blocks shared by the Imp kinds. Each is a TypeBox schema, so one definition gives both
 * the TypeScript type (`Static<>`) and the OpenAPI schema that goes into the CRD. Only keywords that
 * Kubernetes structural schemas accept are used; `structural.ts` strips TypeBox internals and
 * rejects anything else.
 *
 * Every string has a maxLength and every list a maxItems: the API server estimates the cost of CEL
 * rules from these bounds and refuses a CRD whose rules could be too expensive.
 */
import { Type, type SchemaOptions, type Static, type TLiteral, type TUnion } from "@sinclair/typebox";

/** One CEL rule as Kubernetes takes it in `x-kubernetes-validations`. */
export interface CelRule {
  readonly rule: string;
  readonly message: string;
  /** Path, relative to the node carrying the rule, that the error is reported on (e.g. `.maxConcurrent`). */
  readonly fieldPath?: string;
  readonly reason?: "FieldValueInvalid" | "FieldValueForbidden" | "FieldValueRequired" | "FieldValueDuplicate";
}

/** A CEL list literal of strings: `['a', 'b']`. */
export const celList = (xs: readonly string[]): string => `[${xs.map((x) => `'${x}'`).join(", ")}]`;

/** Schema options for attaching CEL rules to a node. */
export const cel = (...rules: CelRule[]): { "x-kubernetes-validations": CelRule[] } => ({
  "x-kubernetes-validations": rules,
});

/**
 * A closed set of strings. It is a TypeBox union of literals, so `Static<>` and `Value.Check` see the
 * exact values; `toK8sSchema` rewrites it to `type: string` + `enum`, since CRDs take no `const`.
 */
export function StringEnum<const T extends readonly string[]>(values: T, options: SchemaOptions = {}): TUnion<TLiteral<T[number]>[]> {
  return Type.Union(values.map((v) => Type.Literal(v as T[number])), options);
}

/** RFC 1123 label: lowercase alphanumerics and `-`, at most 63 characters. */
export const DNS_LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/** RFC 1123 subdomain: dot-separated labels, at most 253 characters (the rule for most object names). */
export const DNS_SUBDOMAIN_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/** A binary size with an explicit unit: `512Mi`, `8Gi`, `1Ti`. Parsed by `parseSizeMiB`. */
export const SIZE_PATTERN = "^[1-9][0-9]{0,6}(Mi|Gi|Ti)$";
/** A duration in hours, minutes, seconds: `90s`, `30m`, `6h`, `1h30m`. Parsed by `parseDurationMs`. */
export const DURATION_PATTERN = "^([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,6}s)?$";
/**
 * An OCI image reference: `[registry[:port]/]path[:tag][@sha256:<hex>]`, lowercase repository path
 * as the distribution spec requires. A loose check; the agent's parser is the strict one.
 */
export const IMAGE_REF_PATTERN =
  "^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$";
/** A POSIX-ish environment variable name. */
export const ENV_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$";
/** Environment names with this prefix are reserved for what Imp itself passes to the workload. */
export const RESERVED_ENV_PREFIX = "IMP_";

/** An object name (RFC 1123 subdomain). */
export const ObjectName = (description: string) =>
  Type.String({ minLength: 1, maxLength: 253, pattern: DNS_SUBDOMAIN_PATTERN, description });

/** Reference by name to an object in the same namespace (or a cluster-scoped one). */
export const objectRef = (description: string) => Type.Object({ name: ObjectName("Name of the referenced object.") }, { description });
export const LocalObjectReference = objectRef("Reference to an object by name.");
export type LocalObjectReference = Static<typeof LocalObjectReference>;

/** A key in a Secret of the same namespace. */
export const SecretKeySelector = Type.Object(
  {
    name: ObjectName("Secret name."),
    key: Type.String({ minLength: 1, maxLength: 253, pattern: "^[-._a-zA-Z0-9]+$", description: "Key in the Secret's data." }),
  },
  { description: "Selects one key of a Secret in the object's namespace." },
);
export type SecretKeySelector = Static<typeof SecretKeySelector>;

/** An environment variable for the workload: a literal value or a Secret key, never both. */
export const EnvVar = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 128, pattern: ENV_NAME_PATTERN, description: "Variable name." }),
    value: Type.Optional(Type.String({ maxLength: 4096, description: "Literal value. Visible to anyone who can read the object; use valueFrom for secrets." })),
    valueFrom: Type.Optional(
      Type.Object(
        { secretKeyRef: SecretKeySelector },
        { description: "Read the value from a Secret when the VM starts; it is never written to the node's disk." },
      ),
    ),
  },
  {
    description: "One environment variable of the workload.",
    ...cel(
      { rule: "has(self.value) != has(self.valueFrom)", message: "exactly one of value or valueFrom must be set", fieldPath: ".value" },
      {
        rule: `!self.name.startsWith('${RESERVED_ENV_PREFIX}')`,
        message: `names starting with ${RESERVED_ENV_PREFIX} are reserved for Imp`,
        fieldPath: ".name",
      },
    ),
  },
);
export type EnvVar = Static<typeof EnvVar>;

/** `env` lists are keyed by name, so a duplicate name is rejected and merge patches work per entry. */
export const EnvList = Type.Array(EnvVar, {
  maxItems: 64,
  description: "Environment of the workload, in addition to the image's.",
  "x-kubernetes-list-type": "map",
  "x-kubernetes-list-map-keys": ["name"],
});

/** Every variable of a Secret, each key becoming a variable. */
export const EnvFromSource = Type.Object(
  {
    secretRef: objectRef("Secret in the object's namespace."),
    prefix: Type.Optional(Type.String({ maxLength: 32, pattern: ENV_NAME_PATTERN, description: "Prepended to each key." })),
  },
  { description: "Imports every key of a Secret as an environment variable." },
);
export type EnvFromSource = Static<typeof EnvFromSource>;

/** What runs inside the VM: one process, started by the guest agent. */
export const Workload = Type.Object(
  {
    command: Type.Array(Type.String({ minLength: 1, maxLength: 4096 }), {
      minItems: 1,
      maxItems: 64,
      description: "Executable and arguments, run without a shell. The VM ends when it exits.",
    }),
    env: Type.Optional(EnvList),
    envFrom: Type.Optional(Type.Array(EnvFromSource, { maxItems: 8, description: "Secrets whose keys all become variables." })),
    workingDir: Type.Optional(Type.String({ maxLength: 1024, pattern: "^/", description: "Absolute directory to start in." })),
    user: Type.Optional(Type.String({ maxLength: 64, pattern: "^[a-z_][a-z0-9_-]*$|^[0-9]+(:[0-9]+)?$", description: "User name or uid[:gid] to run as; default root." })),
  },
  { description: "The single process the guest agent runs." },
);
export type Workload = Static<typeof Workload>;

export const CONDITION_STATUSES = ["True", "False", "Unknown"] as const;

/** The standard `metav1.Condition`, field for field. */
export const Condition = Type.Object(
  {
    type: Type.String({ minLength: 1, maxLength: 316, pattern: "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$", description: "What the condition is about, in CamelCase (Ready, Scheduled, …)." }),
    status: StringEnum(CONDITION_STATUSES, { description: "True, False or Unknown." }),
    observedGeneration: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "The object's metadata.generation the condition was set for." })),
    lastTransitionTime: Type.String({ format: "date-time", description: "When the status last changed." }),
    reason: Type.String({ minLength: 1, maxLength: 1024, pattern: "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", description: "Why, as a CamelCase code (one of the reasons docs/api.md lists for this condition)." }),
    message: Type.String({ maxLength: 32768, description: "Why, for a person: what happened and what to do." }),
  },
  { description: "Standard condition (metav1.Condition)." },
);
export type Condition = Static<typeof Condition>;

export const Conditions = Type.Array(Condition, {
  maxItems: 16,
  description: "Latest observations of the object's state, one per type.",
  "x-kubernetes-list-type": "map",
  "x-kubernetes-list-map-keys": ["type"],
});

/** RFC 3339 timestamp, as Kubernetes writes them. */
export const Timestamp = (description: string) => Type.String({ format: "date-time", description });
