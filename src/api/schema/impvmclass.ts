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
    AGE_COLUMN,
  ],
};
