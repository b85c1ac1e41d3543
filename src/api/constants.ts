/**
 * Names shared by every part that talks about Imp objects: the API group and version, each kind's
 * REST names, and the labels, annotations, finalizers and Secret keys Imp writes. Use these instead
 * of string literals so a rename is one edit and a typo is a type error.
 */

export const GROUP = "imp.dev";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}` as const;
/** `kubectl get imp` lists every Imp object. */
export const CATEGORY = "imp";

/** REST identity of one kind: what a client needs to build a URL or a watch. */
export interface KindNames {
  readonly kind: string;
  readonly listKind: string;
  readonly plural: string;
  readonly singular: string;
  readonly shortNames: readonly string[];
  readonly scope: "Cluster" | "Namespaced";
}

function names(kind: string, plural: string, shortNames: readonly string[], scope: KindNames["scope"]): KindNames {
  return { kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase(), shortNames, scope };
}

export const IMP_VM_CLASS = names("ImpVMClass", "impvmclasses", ["ivmc"], "Cluster");
export const IMP_VM_TEMPLATE = names("ImpVMTemplate", "impvmtemplates", ["ivmt"], "Namespaced");
export const IMP_VM = names("ImpVM", "impvms", ["ivm"], "Namespaced");
export const IMP_VM_RUNNER_POOL = names("ImpVMRunnerPool", "impvmrunnerpools", ["irp"], "Namespaced");
export const IMP_NODE = names("ImpNode", "impnodes", ["inode"], "Cluster");

/**
 * Each kind's REST identity as the Kubernetes runtime takes it (structurally src/kube's
 * ResourceDescriptor): the one definition every client of an Imp kind uses.
 */
export interface KindResource {
  readonly group: string;
  readonly version: string;
  readonly plural: string;
  readonly kind: string;
  readonly namespaced: boolean;
}
const resource = (n: KindNames): KindResource => ({ group: GROUP, version: VERSION, plural: n.plural, kind: n.kind, namespaced: n.scope === "Namespaced" });
export const IMP_VM_CLASSES = resource(IMP_VM_CLASS);
export const IMP_VM_TEMPLATES = resource(IMP_VM_TEMPLATE);
export const IMP_VMS = resource(IMP_VM);
export const IMP_VM_RUNNER_POOLS = resource(IMP_VM_RUNNER_POOL);
export const IMP_NODES = resource(IMP_NODE);

/** Every kind, in the order their CRDs are installed (referenced kinds first). */
export const ALL_KINDS: readonly KindNames[] = [IMP_VM_CLASS, IMP_VM_TEMPLATE, IMP_VM, IMP_VM_RUNNER_POOL, IMP_NODE];

/** `<plural>.<group>`: the name of a kind's CustomResourceDefinition object. */
export const crdName = (k: KindNames): string => `${k.plural}.${GROUP}`;

/** Labels Imp sets. Values are object names, so they fit the 63-character label value limit. */
export const LABELS = {
  /** On ImpVMs created by a pool: the pool's name. Shown as the POOL printer column. */
  pool: "imp.dev/pool",
  /** On ImpVMs: the node the VM is bound to (set with status.nodeName). */
  node: "imp.dev/node",
  /** On objects Imp creates: which Imp component manages them (`operator`, `agent`). */
  managedBy: "app.kubernetes.io/managed-by",
} as const;

/** Annotations Imp sets. */
export const ANNOTATIONS = {
  /** On ImpVMs: the reason a controller asked for termination (for `kubectl describe`). */
  terminationReason: "imp.dev/termination-reason",
  /**
   * On ImpNodes: Imp is being uninstalled (the chart's pre-delete hook, `imp decommission`); the
   * value is when that was asked (RFC 3339). An agent with no VM left removes its state directory,
   * its Lease and its ImpNode, and stops reporting.
   */
  decommission: "imp.dev/decommission",
  /** On ImpNodes: when the operator first saw the node cordoned (RFC 3339); the drain's grace counts from it. Removed on uncordon. */
  drainStarted: "imp.dev/drain-started",
  /** On ImpNodes: when the last VM of a cordoned node ended (RFC 3339): the node is drained. Removed on uncordon. */
  drained: "imp.dev/drained",
  /** On ImpNodes, beside `decommission`: "true" keeps the state directory (image cache, setup key) for a later install. */
  decommissionKeepState: "imp.dev/decommission-keep-state",
} as const;

/** Finalizers: one per external system that must be cleaned up before the object may go. */
export const FINALIZERS = {
  /** Agent: the VMM process is gone and node resources (tap, disks, sockets) are freed. */
  vmTeardown: "imp.dev/vm-teardown",
  /** Operator: the GitHub runner registration of this VM is removed. */
  runnerRegistration: "imp.dev/runner-registration",
} as const;

/**
 * How a runner VM's workload receives its one-time setup (sealed by the operator into
 * `status.setup.sealed`, opened by the node's agent, handed to the guest in memory).
 */
export const RUNNER_SETUP = {
  /** Environment variable the runner command receives the JIT config in (inside the guest only). */
  envName: "IMP_RUNNER_JITCONFIG",
  /** The same value under the name GitHub's runner reads its `--jitconfig` argument from, so no argv carries it. */
  runnerInputEnvName: "ACTIONS_RUNNER_INPUT_JITCONFIG",
  /** With delivery `Stdin`: set to `stdin` (the setup itself is on the runner's stdin, in no variable). */
  deliveryEnvName: "IMP_RUNNER_SETUP",
} as const;

/** Keys of the GitHub App credentials Secret referenced by `ImpVMRunnerPool.spec.github.credentialsSecretRef`. */
export const GITHUB_APP_SECRET_KEYS = {
  appId: "appId",
  installationId: "installationId",
  privateKey: "privateKey",
} as const;

/** Longest ImpVM name: it is the guest hostname and the GitHub runner name, so a DNS label. */
export const MAX_VM_NAME_LENGTH = 63;
/** Longest pool name: `generateName: <pool>-` plus 5 random characters must still fit a VM name. */
export const MAX_POOL_NAME_LENGTH = MAX_VM_NAME_LENGTH - 6;

/** `status.reason` values of ImpVMs, so every writer uses the same words (CamelCase, per API conventions). */
export const VM_REASONS = {
  /** Workload exited 0. */
  Completed: "Completed",
  /** Workload exited non-zero. */
  ExitNonZero: "ExitNonZero",
  /** No node had capacity and a live agent in time. */
  Unschedulable: "Unschedulable",
  /** Image pull, rootfs build or disk setup failed. */
  PrepareFailed: "PrepareFailed",
  /** The guest agent did not answer within the boot timeout. */
  BootTimeout: "BootTimeout",
  /** The VMM process exited before the workload finished. */
  VmmExited: "VmmExited",
  /**
   * The VM's memory cgroup reached its limit (the class's memory plus the VMM's own overhead) and
   * the kernel's OOM killer ended the VMM, as Kubernetes says of a container.
   */
  OOMKilled: "OOMKilled",
  /** The guest could not be reached after the Exec was sent; never re-run with the same setup. */
  GuestUnreachable: "GuestUnreachable",
  /** The guest broke the protocol (malformed or oversized frames) or flooded its console; it was stopped. */
  GuestMisbehaved: "GuestMisbehaved",
  /** The guest agent could not start the workload process (no such program, bad user...). */
  WorkloadStartFailed: "WorkloadStartFailed",
  /** The one-time runner setup could not be minted or delivered. */
  SetupFailed: "SetupFailed",
  /** The node's Lease went stale or the Node disappeared. */
  NodeLost: "NodeLost",
  /** Its node was drained (cordoned) and its job ran past its pool's drainGracePeriod. */
  Drained: "Drained",
  /** spec.expireAfter (from the template) passed. */
  Expired: "Expired",
  /** The VM was deleted before it finished. */
  Deleted: "Deleted",
  /**
   * The VM ended while no agent watched it and left no exit record that verifies: what the workload
   * did is not known, so it is never counted a success (docs/guest-protocol.md, "Exit records").
   */
  OutcomeUnknown: "OutcomeUnknown",
} as const;
export type VMReason = (typeof VM_REASONS)[keyof typeof VM_REASONS];

/** Condition types Imp writes, per kind. */
export const CONDITION_TYPES = {
  vm: {
    /** Bound to a node. */
    Scheduled: "Scheduled",
    /** The sealed setup is in the status (runner VMs only). */
    SetupReady: "SetupReady",
    /** The guest agent answered. */
    Booted: "Booted",
    /** The agent verified that no VMM process of this VM exists. */
    ProcessGone: "ProcessGone",
  },
  pool: {
    /** The pool reconciles: template found, credentials work, GitHub reachable. */
    Ready: "Ready",
    /** The GitHub App credentials produced an installation token. */
    CredentialsValid: "CredentialsValid",
    /** The pool wants more VMs than maxConcurrent or node capacity allows. */
    ScalingLimited: "ScalingLimited",
    /** Scale-set mode: the operator holds the scale set's message session and polls it. */
    ScaleSetListening: "ScaleSetListening",
  },
  node: {
    /** The agent is running and can start VMs. */
    Ready: "Ready",
  },
} as const;
