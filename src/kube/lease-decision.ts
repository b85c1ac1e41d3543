import type { KubeObject, ResourceDescriptor } from "./resource.ts";

export const LEASE_RESOURCE: ResourceDescriptor = {
  group: "coordination.k8s.io",
  version: "v1",
  plural: "leases",
  kind: "Lease",
  namespaced: true,
};

export interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number;
  /** MicroTime: RFC 3339 with exactly six fractional digits. */
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

export interface Lease extends KubeObject {
  spec?: LeaseSpec;
}

/** The lease as read, plus when this process first saw that exact version (its own clock). */
export interface LeaseObservation {
  readonly resourceVersion: string;
  readonly spec: LeaseSpec;
  readonly observedAt: number;
}

/**
 * Records a read. Expiry is judged by how long *this* process has seen the same version, never by
 * comparing the holder's `renewTime` with our clock, so clock skew between nodes cannot cause two
 * leaders (client-go's leaderelection does the same).
 */
export function observeLease(
  previous: LeaseObservation | undefined,
  { lease, now }: { readonly lease: Lease; readonly now: number },
): LeaseObservation {
  const resourceVersion = lease.metadata?.resourceVersion ?? "";
  if (previous !== undefined && previous.resourceVersion === resourceVersion) return previous;
  return { resourceVersion, spec: lease.spec ?? {}, observedAt: now };
}

export type LeaseAction =
  | { readonly kind: "create"; readonly spec: LeaseSpec }
  | { readonly kind: "renew"; readonly spec: LeaseSpec; readonly resourceVersion: string }
  | { readonly kind: "acquire"; readonly spec: LeaseSpec; readonly resourceVersion: string }
  | { readonly kind: "wait"; readonly holder: string; readonly expiresAt: number };

export interface LeaseDecisionInput {
  /** Undefined when the Lease does not exist. */
  readonly observed: LeaseObservation | undefined;
  readonly identity: string;
  readonly now: number;
  readonly leaseDurationMs: number;
}

/**
 * Acquire-or-renew, pure: create a missing lease; renew our own; take over one that is released
 * (empty holder) or unchanged for a full lease duration of the *holder's* choosing; otherwise wait.
 */
export function decideLease(input: LeaseDecisionInput): LeaseAction {
  const { observed, identity, now, leaseDurationMs } = input;
  const stamp = microTime(now);
  const durationSeconds = Math.ceil(leaseDurationMs / 1_000);
  if (observed === undefined) {
    return {
      kind: "create",
      spec: { holderIdentity: identity, leaseDurationSeconds: durationSeconds, acquireTime: stamp, renewTime: stamp, leaseTransitions: 0 },
    };
  }
  const holder = observed.spec.holderIdentity ?? "";
  if (holder === identity) {
    return {
      kind: "renew",
      resourceVersion: observed.resourceVersion,
      spec: { ...observed.spec, holderIdentity: identity, leaseDurationSeconds: durationSeconds, renewTime: stamp },
    };
  }
  const heldForMs = (observed.spec.leaseDurationSeconds ?? durationSeconds) * 1_000;
  const expiresAt = observed.observedAt + heldForMs;
  if (holder !== "" && now < expiresAt) return { kind: "wait", holder, expiresAt };
  return {
    kind: "acquire",
    resourceVersion: observed.resourceVersion,
    spec: {
      holderIdentity: identity,
      leaseDurationSeconds: durationSeconds,
      acquireTime: stamp,
      renewTime: stamp,
      leaseTransitions: (observed.spec.leaseTransitions ?? 0) + 1,
    },
  };
}

/** Kubernetes MicroTime: `2026-01-02T03:04:05.678000Z` (the apiserver wants six digits). */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}
