export { startControlPlane, type ControlPlane, type ControlPlaneOptions, type ControlPlaneState, type EtcdEndpoint } from "./control-plane.ts";
export { findBinaries, cacheDir, KUBE_VERSION, ETCD_VERSION, type ControlPlaneBinaries } from "./binaries.ts";
export { freePort } from "./ports.ts";
export { clusterUp, clusterDown, clusterStatus, isProcessAlive, parseStartTime } from "./detached-cluster.ts";
export { DEVCLUSTER_ERROR_CODES } from "./error-codes.ts";
