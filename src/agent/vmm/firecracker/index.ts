// The Firecracker driver's public surface; the rest (fault parsing, file tails) stays inside.
export { FirecrackerApi, type FirecrackerInstanceInfo } from "./api-client.ts";
export { actionRequest, configRequests, type FirecrackerAction, type FirecrackerPaths, type FirecrackerRequest } from "./api-requests.ts";
export { FIRECRACKER_BASE_CMDLINE, firecrackerCmdline } from "./cmdline.ts";
export { defaultFirecrackerDriverConfig, FirecrackerDriver, type FirecrackerDriverOptions } from "./driver.ts";
export type { JailerOptions } from "./jailer.ts";
export type { FirecrackerLayout, JailLayout, JailLink } from "./layout.ts";
export { FirecrackerVm } from "./vm.ts";
