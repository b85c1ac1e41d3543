/**
 * ImpVMTemplate (namespaced): what a VM runs — image, extra layers, kernel, workload, network
 * policy, lifetime. An ImpVM references one by name or embeds the same fields inline.
 */
import { Type, type Static } from "@sinclair/typebox";
import { IMP_VM_TEMPLATE } from "../constants.ts";
import {
  cel,
  DNS_LABEL_PATTERN,
  DURATION_PATTERN,
  IMAGE_REF_PATTERN,
  objectRef,
  StringEnum,
  Workload,
} from "./common.ts";
import { AGE_COLUMN, type ImpObject, type KindDefinition } from "./kind.ts";

/**
 * Egress policy. Whatever the mode, a VM never reaches the node's own services, the Kubernetes API
 * or cloud metadata addresses (DESIGN invariant I6).
 */
export const EGRESS_MODES = ["none", "internet", "restricted"] as const;
export type EgressMode = (typeof EGRESS_MODES)[number];

export const ImageRef = (description: string) =>
  Type.String({ minLength: 1, maxLength: 512, pattern: IMAGE_REF_PATTERN, description });

export const Network = Type.Object(
  {
    egress: StringEnum(EGRESS_MODES, {
      default: "internet",
      description: "`none`: no network; `internet`: outbound NAT; `restricted`: only to allowedCIDRs.",
    }),
    allowedCIDRs: Type.Optional(
      Type.Array(Type.String({ maxLength: 43, ...cel({ rule: "isCIDR(self)", message: "must be a CIDR such as 10.0.0.0/8" }) }), {
        maxItems: 32,
        description: "Destinations reachable when egress is `restricted`.",
      }),
    ),
  },
  {
    description: "Network access of the VM.",
    ...cel(
      {
        rule: "self.egress == 'restricted' ? has(self.allowedCIDRs) && size(self.allowedCIDRs) > 0 : !has(self.allowedCIDRs)",
        message: "allowedCIDRs is required when egress is restricted and forbidden otherwise",
        fieldPath: ".allowedCIDRs",
      },
    ),
  },
);
export type Network = Static<typeof Network>;

export const ImpVMTemplateSpec = Type.Object(
  {
    classRef: objectRef("ImpVMClass (cluster-scoped) giving the VM's vCPUs, memory and disk."),
    image: ImageRef("OCI image of the root filesystem, e.g. `ghcr.io/org/runner:2.330` or pinned by `@sha256:`."),
    extraLayers: Type.Optional(
      Type.Array(
        Type.Object({ image: ImageRef("OCI image whose layers are applied, in order, on top of `image`.") }),
        { maxItems: 8, description: "Images applied on top of `image`, e.g. the runner layer." },
      ),
    ),
    imagePullSecretRef: Type.Optional(
      objectRef("Secret of type kubernetes.io/dockerconfigjson with registry credentials for image and extraLayers."),
    ),
    kernel: Type.String({
      minLength: 1,
      maxLength: 63,
      pattern: DNS_LABEL_PATTERN,
      default: "default",
      description: "Kernel name; each node's agent config maps it to a kernel image.",
    }),
    bootArgs: Type.Optional(
      Type.String({ maxLength: 1024, pattern: "^[ -~]*$", description: "Extra kernel command line, appended to Imp's own." }),
    ),
    workload: Type.Optional(Workload),
    network: Type.Optional(Network),
    expireAfter: Type.String({
      minLength: 2,
      maxLength: 24,
      pattern: DURATION_PATTERN,
      default: "6h",
      description: "Maximum lifetime from creation; after it the VM is stopped and marked Failed/Expired.",
    }),
  },
  { description: "What a VM runs." },
);
export type ImpVMTemplateSpec = Static<typeof ImpVMTemplateSpec>;
export type ImpVMTemplate = ImpObject<"ImpVMTemplate", ImpVMTemplateSpec, never>;

export const impVMTemplateDefinition: KindDefinition = {
  names: IMP_VM_TEMPLATE,
  description: "ImpVMTemplate describes what an Imp microVM runs: image, layers, kernel, workload, network, lifetime.",
  spec: ImpVMTemplateSpec,
  printerColumns: [
    { name: "Class", type: "string", jsonPath: ".spec.classRef.name" },
    { name: "Image", type: "string", jsonPath: ".spec.image" },
    { name: "Kernel", type: "string", jsonPath: ".spec.kernel", priority: 1 },
    { name: "Egress", type: "string", jsonPath: ".spec.network.egress", priority: 1 },
    AGE_COLUMN,
  ],
};
