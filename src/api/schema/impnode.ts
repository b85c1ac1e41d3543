/**
 * ImpNode (cluster-scoped, name = Kubernetes node name): what one node's agent can run and has
 * committed. Written by that node's agent; the scheduler reads it. Liveness is not here but in a
 * `coordination.k8s.io` Lease per node, so a stale ImpNode alone never means a live node.
 */
import { Type, type Static } from "@sinclair/typebox";
import { IMP_NODE } from "../constants.ts";
import { ARCHES, VMMS } from "./impvmclass.ts";
import { Conditions, DNS_LABEL_PATTERN, StringEnum } from "./common.ts";
import { AGE_COLUMN, type ImpObject, type KindDefinition } from "./kind.ts";

export const ImpNodeSpec = Type.Object(
  {
    unschedulable: Type.Boolean({ default: false, description: "Cordon: the scheduler binds no new VMs here; running VMs continue." }),
  },
  { description: "Operator-set intent for the node.", default: {} },
);
export type ImpNodeSpec = Static<typeof ImpNodeSpec>;

const Resources = (what: string) =>
  Type.Object(
    {
      vcpu: Type.Integer({ minimum: 0, maximum: 100000, description: `vCPUs ${what}.` }),
      memoryMiB: Type.Integer({ minimum: 0, maximum: 1073741824, format: "int64", description: `Guest memory ${what}, MiB.` }),
      vmSlots: Type.Integer({ minimum: 0, maximum: 100000, description: `VMs ${what}.` }),
    },
    { description: `Resources ${what}.` },
  );

const Version = (what: string) => Type.Optional(Type.String({ maxLength: 128, description: `${what} version.` }));

export const ImpNodeStatus = Type.Object(
  {
    observedGeneration: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "The metadata.generation this status was written for." })),
    arch: Type.Optional(StringEnum(ARCHES, { description: "Host CPU architecture." })),
    kvm: Type.Optional(Type.Boolean({ description: "KVM is usable for fast VMs, as measured by the agent's probe (not merely /dev/kvm existing)." })),
    accel: Type.Optional(StringEnum(["kvm", "tcg"] as const, { description: "Acceleration the agent boots QEMU VMs with." })),
    kvmReason: Type.Optional(Type.String({ maxLength: 1024, description: "Why the agent decided kvm and accel as it did (probe result or node config)." })),
    setupKey: Type.Optional(
      Type.Object(
        {
          algorithm: Type.String({ maxLength: 128, description: "HPKE suite the operator seals runner setups with." }),
          keyId: Type.String({ minLength: 16, maxLength: 16, pattern: "^[0-9a-f]{16}$", description: "First 16 hex digits of the public key's SHA-256." }),
          publicKey: Type.String({ minLength: 40, maxLength: 64, pattern: "^[A-Za-z0-9+/]+={0,2}$", description: "Raw X25519 public key, base64. The private half never leaves the node." }),
        },
        { description: "The node's public key for sealed one-time runner setups." },
      ),
    ),
    vmms: Type.Optional(
      Type.Array(StringEnum(VMMS), { maxItems: 4, description: "VMMs the agent found and can start.", "x-kubernetes-list-type": "set" }),
    ),
    kernels: Type.Optional(
      Type.Array(Type.String({ maxLength: 63, pattern: DNS_LABEL_PATTERN }), {
        maxItems: 32,
        description: "Kernel names the agent config maps to files.",
        "x-kubernetes-list-type": "set",
      }),
    ),
    capacity: Type.Optional(Resources("offered to VMs")),
    allocated: Type.Optional(Resources("held by VMs bound here")),
    versions: Type.Optional(
      Type.Object(
        { agent: Version("Imp agent"), guestAgent: Version("Guest agent"), firecracker: Version("Firecracker"), qemu: Version("QEMU") },
        { description: "Software versions on the node." },
      ),
    ),
    imageCache: Type.Optional(
      Type.Object(
        {
          images: Type.Integer({ minimum: 0, maximum: 1000000, description: "Base images in the cache." }),
          usedBytes: Type.Integer({ minimum: 0, format: "int64", description: "Bytes used by the cache." }),
          limitBytes: Type.Optional(Type.Integer({ minimum: 0, format: "int64", description: "Eviction threshold." })),
        },
        { description: "Node-local rootfs image cache use." },
      ),
    ),
    conditions: Type.Optional(Conditions),
  },
  { description: "What the node's agent found and has committed." },
);
export type ImpNodeStatus = Static<typeof ImpNodeStatus>;
export type ImpNode = ImpObject<"ImpNode", ImpNodeSpec, ImpNodeStatus>;

export const impNodeDefinition: KindDefinition = {
  names: IMP_NODE,
  description: "ImpNode reports what one node's Imp agent can run (VMMs, KVM, capacity) and what it has allocated.",
  spec: ImpNodeSpec,
  status: ImpNodeStatus,
  printerColumns: [
    { name: "KVM", type: "boolean", jsonPath: ".status.kvm" },
    { name: "VMMs", type: "string", jsonPath: ".status.vmms" },
    { name: "vCPU-Cap", type: "integer", jsonPath: ".status.capacity.vcpu" },
    { name: "vCPU-Used", type: "integer", jsonPath: ".status.allocated.vcpu" },
    { name: "VM-Slots", type: "integer", jsonPath: ".status.capacity.vmSlots" },
    { name: "VMs", type: "integer", jsonPath: ".status.allocated.vmSlots" },
    { name: "Unschedulable", type: "boolean", jsonPath: ".spec.unschedulable", priority: 1 },
    { name: "Agent", type: "string", jsonPath: ".status.versions.agent", priority: 1 },
    AGE_COLUMN,
  ],
};
