export { FirecrackerApi, parseInstanceInfo, type ApiAnswer, type InstanceInfo } from "./api-client.ts";
export {
  actionRequest,
  assertFirecrackerSpec,
  configRequests,
  DESCRIBE_INSTANCE,
  GUEST_IFACE_ID,
  type FirecrackerAction,
  type FirecrackerPaths,
  type FirecrackerRequest,
} from "./api-requests.ts";
export { FIRECRACKER_BASE_CMDLINE, firecrackerCmdline } from "./cmdline.ts";
export { defaultFirecrackerDriverConfig, FirecrackerDriver, type FirecrackerDriverOptions } from "./driver.ts";
export { faultError, parseFaultMessage } from "./faults.ts";
export { firecrackerArgv, jailerArgv, type JailerOptions } from "./jailer.ts";
export { firecrackerId, jailedLayout, unjailedLayout, type FirecrackerLayout, type JailLayout, type JailLink } from "./layout.ts";
export { DEFAULT_GUEST_VSOCK_PORT as FIRECRACKER_DEFAULT_GUEST_VSOCK_PORT, FirecrackerVm, type StopTimings } from "./vm.ts";
