/**
 * ImpVM (namespaced): one short-lived microVM running one workload. The spec is immutable: a VM is
 * never re-run with different inputs, a new ImpVM takes its place. The status is written by the
 * scheduler (binding), the operator (runner identity, setup) and the node's agent (everything from
 * Preparing to a terminal phase).
 */
import { Type, type Static } from "@sinclair/typebox";
import { IMP_VM, MAX_VM_NAME_LENGTH } from "../constants.ts";
import { BOUND_VM_PHASES, TERMINAL_VM_PHASES, VM_PHASE_TRANSITIONS, VM_PHASES } from "../phases.ts";
import { VMMS } from "./impvmclass.ts";
import { ImpVMTemplateSpec } from "./impvmtemplate.ts";
import { VmCacheStatus, VmCacheVolume } from "./cache.ts";
import { cel, celList, Conditions, DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, objectRef, StringEnum, Timestamp, Workload } from "./common.ts";
import { AGE_COLUMN, type ImpObject, type KindDefinition } from "./kind.ts";

export const LIFECYCLES = ["ephemeral"] as const;
export type Lifecycle = (typeof LIFECYCLES)[number];

/** Whether the workload needs a one-time runner setup (runner VMs) or none. */
export const RUNNER_SETUPS = ["None", "Required"] as const;
export type RunnerSetup = (typeof RUNNER_SETUPS)[number];

/**
 * How the workload receives its setup: in its environment (`IMP_RUNNER_JITCONFIG` and
 * `ACTIONS_RUNNER_INPUT_JITCONFIG`, which GitHub's runner reads), or on its stdin, read once and in
 * no environment (`IMP_RUNNER_SETUP=stdin` says so).
 */
export const SETUP_DELIVERIES = ["Environment", "Stdin"] as const;
export type SetupDelivery = (typeof SETUP_DELIVERIES)[number];

/**
 * Where the one-time runner setup is: `Pending` (not minted), `Minted` (sealed into the status =
 * registered), `Sent` (Exec sent, outcome unknown), `Delivered` (the guest started the process with
 * it), `Failed` (never delivered; the VM is terminal), `Deleted` (the sealed setup removed after the VM ended).
 */
export const SETUP_STATES = ["Pending", "Minted", "Sent", "Delivered", "Failed", "Deleted"] as const;
export type SetupState = (typeof SETUP_STATES)[number];

/** VM_PHASE_TRANSITIONS as a CEL map literal over the non-final phases. */
function celTransitionMap(): string {
  const entries = Object.entries(VM_PHASE_TRANSITIONS).filter(([, to]) => to.length > 0);
  return `{${entries.map(([from, to]) => `'${from}': ${celList(to)}`).join(", ")}}`;
}

export const ImpVMSpec = Type.Object(
  {
    templateRef: Type.Optional(objectRef("ImpVMTemplate in the VM's namespace. Exactly one of templateRef and template.")),
    template: Type.Optional(Type.Object(ImpVMTemplateSpec.properties, { description: "Inline template. Exactly one of templateRef and template." })),
    workload: Type.Optional(Workload),
    nodeName: Type.Optional(
      Type.String({ maxLength: 253, pattern: DNS_SUBDOMAIN_PATTERN, description: "Pin the VM to this node; the scheduler still checks capacity." }),
    ),
    lifecycle: StringEnum(LIFECYCLES, { default: "ephemeral", description: "`ephemeral`: runs once, never restarted." }),
    runnerSetup: Type.Optional(
      StringEnum(RUNNER_SETUPS, {
        default: "None",
        description:
          "`Required`: the workload starts only with a one-time runner setup, which the operator mints and seals to the VM's node; the agent boots the VM meanwhile and waits for it (bounded). Runner pools set it on their VMs.",
      }),
    ),
    cache: Type.Optional(VmCacheVolume),
    runnerSetupDelivery: Type.Optional(
      StringEnum(SETUP_DELIVERIES, {
        default: "Environment",
        description:
          "How the workload receives its setup: `Environment` (`IMP_RUNNER_JITCONFIG` and `ACTIONS_RUNNER_INPUT_JITCONFIG`, as GitHub's runner reads it) or `Stdin` (written to its stdin and closed: read once, in no environment; `IMP_RUNNER_SETUP=stdin` is set).",
      }),
    ),
  },
  {
    description: "Desired VM. Immutable after creation.",
    ...cel(
      {
        rule: "has(self.templateRef) != has(self.template)",
        message: "exactly one of templateRef or template must be set",
        fieldPath: ".templateRef",
      },
      {
        rule: "!has(self.template) || has(self.template.workload) || has(self.workload)",
        message: "workload is required when the inline template has none",
        fieldPath: ".workload",
        reason: "FieldValueRequired",
      },
      { rule: "self == oldSelf", message: "spec is immutable; create a new ImpVM instead" },
    ),
  },
);
export type ImpVMSpec = Static<typeof ImpVMSpec>;

/** When the VM entered each phase (absent if it never did). */
export const PhaseTimestamps = Type.Object(
  {
    pending: Type.Optional(Timestamp("Accepted by the operator.")),
    scheduled: Type.Optional(Timestamp("Bound to a node.")),
    preparing: Type.Optional(Timestamp("Agent started preparing disks.")),
    booting: Type.Optional(Timestamp("VMM process started.")),
    running: Type.Optional(Timestamp("Workload process started in the guest.")),
    succeeded: Type.Optional(Timestamp("Workload exited 0.")),
    failed: Type.Optional(Timestamp("VM failed.")),
    terminating: Type.Optional(Timestamp("Deletion began.")),
  },
  { description: "When the VM entered each phase." },
);
export type PhaseTimestamps = Static<typeof PhaseTimestamps>;

export const ImpVMStatus = Type.Object(
  {
    phase: Type.Optional(StringEnum(VM_PHASES, { description: "Lifecycle phase." })),
    reason: Type.Optional(Type.String({ maxLength: 128, pattern: "^[A-Za-z][A-Za-z0-9]*$", description: "CamelCase reason for the phase, e.g. NodeLost, Expired, BootTimeout." })),
    message: Type.Optional(Type.String({ maxLength: 4096, description: "Human-readable detail for the phase." })),
    observedGeneration: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "The metadata.generation this status was written for." })),
    conditions: Type.Optional(Conditions),
    nodeName: Type.Optional(
      Type.String({ minLength: 1, maxLength: 253, pattern: DNS_SUBDOMAIN_PATTERN, description: "Node the VM is bound to. Set once by the scheduler." }),
    ),
    vmm: Type.Optional(StringEnum(VMMS, { description: "VMM the agent started." })),
    phaseTimestamps: Type.Optional(PhaseTimestamps),
    prepareDurationMs: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "Preparing → Booting, in ms." })),
    bootDurationMs: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "Booting → guest agent answered, in ms (for a VM restored from a memory snapshot: restore → guest agent answered)." })),
    startedFrom: Type.Optional(StringEnum(["Boot", "Snapshot"] as const, { description: "How the VM came up: a boot, or a restore of its node's memory snapshot (its class's `startFrom: Snapshot`, when the node had one)." })),
    exitCode: Type.Optional(Type.Integer({ minimum: 0, maximum: 255, description: "Exit code of the workload (128+n for signal n)." })),
    guestIP: Type.Optional(Type.String({ maxLength: 45, description: "Guest address on its tap network.", ...cel({ rule: "isIP(self)", message: "must be an IP address" }) })),
    execId: Type.Optional(
      Type.String({
        maxLength: 128,
        pattern: "^[A-Za-z0-9._-]+$",
        description: "Idempotency id of the workload Exec, derived from the ImpVM uid. Set once.",
        ...cel({ rule: "self == oldSelf", message: "execId is set once" }),
      }),
    ),
    runner: Type.Optional(
      Type.Object(
        {
          id: Type.Integer({ minimum: 1, format: "int64", description: "GitHub runner id." }),
          name: Type.String({ minLength: 1, maxLength: 64, description: "GitHub runner name (the ImpVM name)." }),
        },
        { description: "GitHub runner registered for this VM. Set once.", ...cel({ rule: "self == oldSelf", message: "runner is set once" }) },
      ),
    ),
    setup: Type.Optional(
      Type.Object(
        {
          state: StringEnum(SETUP_STATES, { description: "Where the one-time setup is." }),
          sealed: Type.Optional(
            Type.String({
              maxLength: 90_000,
              description:
                "The one-time setup sealed to the bound node's key (a JSON HPKE envelope; the VM uid is its associated data): only that node's agent can open it. Written with state Minted, never changed, removed when the VM ends.",
            }),
          ),
          mintedAt: Type.Optional(Timestamp("When the forge issued the one-time setup (the runner was registered).")),
          deliveredAt: Type.Optional(Timestamp("When the guest confirmed the Exec.")),
        },
        {
          description: "Delivery state of the one-time runner setup.",
          ...cel({ rule: "!has(self.sealed) || (has(oldSelf.sealed) && self.sealed == oldSelf.sealed)", message: "the sealed setup is written once, with the setup, and may only be removed" }),
        },
      ),
    ),
    inputs: Type.Optional(
      Type.Object(
        {
          sealed: Type.String({
            maxLength: 350_000,
            description:
              "The Secret values the VM's environment and image pull read, sealed by the operator to the bound node's key (a JSON HPKE envelope, VM uid as associated data): node agents cannot read Secrets.",
          }),
        },
        { description: "The VM's Secret inputs, sealed to its node. Set once.", ...cel({ rule: "self == oldSelf", message: "the sealed inputs are set once" }) },
      ),
    ),
    cache: Type.Optional(VmCacheStatus),
    teardown: Type.Optional(
      Type.Object(
        {
          processGone: Type.Boolean({ description: "The agent verified no VMM process of this VM exists." }),
          resourcesReleased: Type.Boolean({ description: "Tap, disks, sockets and cgroup are removed." }),
          completedAt: Type.Optional(Timestamp("When both became true.")),
        },
        { description: "Node-side cleanup, checked separately from finalizer removal." },
      ),
    ),
  },
  {
    description: "Observed VM state.",
    ...cel(
      {
        rule: `!has(oldSelf.phase) || !(oldSelf.phase in ${celList(TERMINAL_VM_PHASES)}) || (has(self.phase) && self.phase == oldSelf.phase)`,
        message: "phase Succeeded and Failed are final",
        fieldPath: ".phase",
      },
      {
        rule: `!has(oldSelf.phase) || oldSelf.phase in ${celList(TERMINAL_VM_PHASES)} || (has(self.phase) && (self.phase == oldSelf.phase || self.phase in ${celTransitionMap()}[oldSelf.phase]))`,
        message: "phase only moves forward (Pending, Scheduled, Preparing, Booting, Running, Succeeded), or to Failed or Terminating; Terminating ends in Succeeded or Failed",
        fieldPath: ".phase",
      },
      {
        rule: "!has(oldSelf.nodeName) || (has(self.nodeName) && self.nodeName == oldSelf.nodeName)",
        message: "nodeName is set once; a VM never moves to another node",
        fieldPath: ".nodeName",
      },
      {
        rule: `!has(self.phase) || !(self.phase in ${celList(BOUND_VM_PHASES)}) || has(self.nodeName)`,
        message: "nodeName is required in phases Scheduled, Preparing, Booting and Running",
        fieldPath: ".nodeName",
        reason: "FieldValueRequired",
      },
      {
        rule: "!has(self.phase) || self.phase != 'Succeeded' || (has(self.exitCode) && self.exitCode == 0)",
        message: "phase Succeeded requires exitCode 0",
        fieldPath: ".exitCode",
      },
    ),
  },
);
export type ImpVMStatus = Static<typeof ImpVMStatus>;
export type ImpVM = ImpObject<"ImpVM", ImpVMSpec, ImpVMStatus>;

export const impVMDefinition: KindDefinition = {
  names: IMP_VM,
  description: "ImpVM is one short-lived Imp microVM running one workload, then ending.",
  spec: ImpVMSpec,
  status: ImpVMStatus,
  nameSchema: {
    maxLength: MAX_VM_NAME_LENGTH,
    pattern: DNS_LABEL_PATTERN,
    description: "A DNS label: the VM's name is its guest hostname and its GitHub runner name.",
  },
  printerColumns: [
    { name: "Phase", type: "string", jsonPath: ".status.phase" },
    { name: "Node", type: "string", jsonPath: ".status.nodeName" },
    { name: "Pool", type: "string", jsonPath: ".metadata.labels.imp\\.dev/pool" },
    { name: "Reason", type: "string", jsonPath: ".status.reason", priority: 1 },
    { name: "Setup", type: "string", jsonPath: ".status.setup.state", priority: 1 },
    { name: "Boot-ms", type: "integer", jsonPath: ".status.bootDurationMs", priority: 1 },
    { name: "From", type: "string", jsonPath: ".status.startedFrom", priority: 1 },
    { name: "Exit", type: "integer", jsonPath: ".status.exitCode", priority: 1 },
    { name: "IP", type: "string", jsonPath: ".status.guestIP", priority: 1 },
    AGE_COLUMN,
  ],
  selectableFields: [".status.nodeName", ".status.phase"],
};
