// Public entry of the node agent part. Other parts import only from here.
export * from "./guest/index.ts";
export * from "./vmm/qemu/index.ts";
export * from "./vsock/index.ts";
export * from "./image/pull/index.ts";
export * from "./image/layers/index.ts";
export * from "./image/ext4/index.ts";
export * from "./image/cache/index.ts";
export * from "./image/disks/index.ts";
export * from "./vmm/types.ts";
export * from "./vmm/direct-launcher.ts";
export * from "./vmm/netns-launcher.ts";
export * from "./vmm/kvm-probe.ts";
export * from "./vmm/firecracker/index.ts";
export * from "./supervisor/index.ts";
export * from "./network/index.ts";
export * from "./node/index.ts";
