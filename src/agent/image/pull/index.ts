/**
 * Public entry of the image pull side: `pullImage(reference, options) → PulledImage`, or a
 * long-lived `ImagePuller` that keeps registry tokens cached across pulls.
 * Contract for the image build side: when a pull resolves, the config and every layer blob named in the
 * result are in `options.store`, verified by digest and size; layers are in application order and
 * still compressed (gzip or zstd, see each layer's `mediaType`; plain tar is possible too).
 */
export type * from "./types.ts";
export { ImagePuller, pullImage } from "./pull-image.ts";
export { isLoopbackRegistry } from "./http.ts";
export { parseLayoutReference, type LayoutReference } from "./oci-layout.ts";
export type { PullerOptions } from "./pull-image.ts";
export { MediaTypes } from "./media-types.ts";
export { credentialsFromDockerConfig, credentialsFromSecretData, firstCredentials } from "./docker-config.ts";
export { parseReference, formatReference } from "./reference.ts";
export type { ImageReference } from "./reference.ts";
export { nodePlatform, formatPlatform } from "./platform.ts";
export type { ContentStore, ExpectedBlob, StoredBlob } from "../store/index.ts";
export { FsContentStore, ImageRefs } from "../store/index.ts";
export type { ImageRecord } from "../store/index.ts";
