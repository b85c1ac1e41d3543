/**
 * ImpVMClass (cluster-scoped): the hardware shape of a VM. Templates point at a class; the scheduler
 * reserves the class's vCPUs and memory on a node.
 */
import { Type, type Static } from "@sinclair/typebox";
import { IMP_VM_CLASS } from "../constants.ts";
import { SIZE_PATTERN, StringEnum } from "./common.ts";
import { AGE_COLUMN, type ImpObject, type KindDefinition } from "./kind.ts";

/** CPU architectures, named as OCI platforms name them (the image index is matched on these). */
export const ARCHES = ["amd64", "arm64"] as const;
export type Arch = (typeof ARCHES)[number];

/** VMMs the agent can drive. */
export const VMMS = ["firecracker", "qemu"] as const;
export type Vmm = (typeof VMMS)[number];

/** How a VM of the class starts: a full boot, or a restore from its node's memory snapshot of the same image and shape. */
export const START_FROM = ["Boot", "Snapshot"] as const;
export type StartFrom = (typeof START_FROM)[number];

export const ImpVMClassSpec = Type.Object(
  {
    vcpu: Type.Integer({ minimum: 1, maximum: 64, description: "Virtual CPUs." }),
    memoryMiB: Type.Integer({ minimum: 128, maximum: 1048576, description: "Guest memory in MiB; accounted to the VM's own cgroup on the node." }),
    scratchDisk: Type.String({
      maxLength: 16,
      pattern: SIZE_PATTERN,
      default: "4Gi",
      description: "Size of the VM's private writable disk (overlay upper layer), e.g. `8Gi`.",
    }),
    arch: StringEnum(ARCHES, { default: "amd64", description: "CPU architecture; picks the image platform and the nodes." }),
    preferredVmm: Type.Optional(
      StringEnum(VMMS, { description: "VMM to use where the node has it; if unset the node's agent picks (Firecracker when KVM is present)." }),
    ),
    startFrom: Type.Optional(StringEnum(START_FROM, {
      default: "Boot",
      description:
        "`Snapshot`: a VM starts by restoring its node's memory snapshot of a template VM of the same image, kernel and shape (booted to a ready guest agent, never given a setup or a job), with its own copy-on-write memory and disk, and its entropy, clock, hostname, address and MAC refreshed before its setup is sent. A node without such a snapshot boots the VM and makes one; a snapshot that fails to restore falls back to a boot. QEMU only for now. See docs/snapshots.md.",
    })),
  },
  { description: "Hardware shape of a VM." },
);
export type ImpVMClassSpec = Static<typeof ImpVMClassSpec>;
export type ImpVMClass = ImpObject<"ImpVMClass", ImpVMClassSpec, never>;

export const impVMClassDefinition: KindDefinition = {
  names: IMP_VM_CLASS,
  description: "ImpVMClass is the hardware shape of an Imp microVM: vCPUs, memory, scratch disk, architecture.",
  spec: ImpVMClassSpec,
  printerColumns: [
    { name: "vCPU", type: "integer", jsonPath: ".spec.vcpu" },
    { name: "Memory", type: "integer", jsonPath: ".spec.memoryMiB", description: "MiB" },
    { name: "Disk", type: "string", jsonPath: ".spec.scratchDisk" },
    { name: "Arch", type: "string", jsonPath: ".spec.arch" },
    { name: "VMM", type: "string", jsonPath: ".spec.preferredVmm" },
    { name: "Start", type: "string", jsonPath: ".spec.startFrom" },
    AGE_COLUMN,
  ],
};
