/**
 * What the CRD generator needs to know about one kind besides its schemas: REST names, printer
 * columns, rules on the whole object, and which fields clients may select on.
 */
import type { TSchema } from "@sinclair/typebox";
import type { KindNames } from "../constants.ts";
import type { CelRule } from "./common.ts";
import type { ObjectMeta } from "../../shared/index.ts";

/** One `additionalPrinterColumns` entry. */
export interface PrinterColumn {
  readonly name: string;
  readonly type: "string" | "integer" | "number" | "boolean" | "date";
  readonly jsonPath: string;
  readonly description?: string;
  /** 0 shows in `kubectl get`; higher only with `-o wide`. */
  readonly priority?: number;
}

/** Everything about a kind that ends up in its CRD. */
export interface KindDefinition {
  readonly names: KindNames;
  readonly description: string;
  readonly spec: TSchema;
  readonly status?: TSchema;
  /** CEL rules on the whole object (they may read `self.metadata.name`). */
  readonly objectRules?: readonly CelRule[];
  /** Restriction on `metadata.name` (the only metadata field a CRD may constrain), e.g. a DNS label. */
  readonly nameSchema?: { readonly maxLength: number; readonly pattern?: string; readonly description: string };
  readonly printerColumns: readonly PrinterColumn[];
  /** JSON paths usable in field selectors (`selectableFields`). */
  readonly selectableFields?: readonly string[];
}

/** The shape every Imp object has on the wire. */
export type ImpObject<K extends string, Spec, Status> = {
  apiVersion: "imp.dev/v1alpha1";
  kind: K;
  metadata: ObjectMeta;
  spec: Spec;
  status?: Status;
};

/** Printer column every kind ends with. */
export const AGE_COLUMN: PrinterColumn = { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" };
