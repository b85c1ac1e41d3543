/**
 * Kubernetes object metadata in its JSON (wire) form, shared by the API types (src/api) and the
 * controller runtime (src/kube): timestamps are RFC 3339 strings, not the `Date`s of client-node's
 * generated models, because Imp reads and writes objects as JSON. Type aliases (not interfaces) so
 * they stay assignable to index-signature types.
 */

/** An owner reference as JSON carries it. */
export type OwnerReference = {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
};

/** Object metadata fields Imp reads or writes. */
export type ObjectMeta = {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
};

