// What a machine needs before it runs any VM: KVM, images, drivers (the node agent and `imp run` build it alike).
export { openVmHost, type VmHost, type VmHostOptions } from "./vm-host.ts";
export { VmImages, type VmImageRequest, type VmImagesOptions } from "./vm-images.ts";
