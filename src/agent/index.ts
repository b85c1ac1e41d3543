// Public entry of the node agent part: what other parts use (`imp agent`, `imp run`, `imp image`).
// Listed by name so the surface is reviewed when it grows; tests reach the internals directly.

// `imp agent`: the node's control loop.
export { createNodeAgent, loadAgentConfig, parseAgentConfig, NodeAgent, type AgentConfig, type CreateNodeAgentOptions } from "./node/index.ts";

// `imp run`: the same VM host and boot pipeline the agent runs, with its own ports.
export { openVmHost, VmImages, type VmHost } from "./host/index.ts";
export { bootPipeline, DEFAULT_RUNTIME_TIMEOUTS, DEFAULT_WORKLOAD_ENV, runToEnd, VmDir, type BootDeps, type RuntimeTimeouts, type VmBootRequest, type VmOutcome } from "./vm/index.ts";
export { DEFAULT_MAX_CONSOLE_BYTES, DirectLauncher, supervisedConsoleBound, FirecrackerDriver, probeKvm, QemuDriver, readHostTscKhz, type VmmDriver, type VmmKind } from "./vmm/index.ts";
export { GuestClient, type ExitEvent, type OutputEvent, type SignalName } from "./guest/index.ts";

// `imp image`: pull, store, build and cache images without Kubernetes.
export {
  credentialsFromDockerConfig,
  credentialsFromSecretData,
  formatPlatform,
  formatReference,
  FsContentStore,
  ImagePuller,
  ImageRefs,
  nodePlatform,
  parseReference,
  type CredentialLookup,
  type ImageRecord,
  type Platform,
  type PullProgress,
} from "./image/pull/index.ts";
export { BaseImages, fileDigestOf, ImageCache, type BuildEvent } from "./image/cache/index.ts";
export { layerBlobsOf, localLayer, type LayerBlob } from "./image/layers/index.ts";
export { AGENT_ERROR_CODES } from "./error-codes.ts";
