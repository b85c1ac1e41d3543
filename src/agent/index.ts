// Public entry of the node agent part. Other parts import only from here.
export * from "./guest/index.ts";
export * from "./vmm/qemu/index.ts";
export * from "./vsock/index.ts";
export * from "./image/pull/index.ts";
