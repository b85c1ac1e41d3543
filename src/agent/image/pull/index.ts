/**
 * Public entry of the image pull side (DESIGN §4): `pullImage(reference, options) → PulledImage`.
 * Contract for the image build side: when `pullImage` resolves, the config and every layer blob named
 * in the result are in `options.store`, verified by digest and size; layers are in application order
 * and still compressed (gzip or zstd, see each layer's `mediaType`).
 */
export type * from "./types.ts";
export type { ContentStore, ExpectedBlob, StoredBlob } from "../store/index.ts";
export { FsContentStore, ImageRefs } from "../store/index.ts";
export type { ImageRecord } from "../store/index.ts";
