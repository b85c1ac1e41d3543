/** Public entry of the node's image content store. */
export { FsContentStore } from "./content-store.ts";
export type { ContentStore, ExpectedBlob, StoredBlob, WriteOptions } from "./content-store.ts";
export type { BlobWriter } from "./blob-writer.ts";
export { ImageRefs } from "./image-refs.ts";
export type { ImageRecord } from "./image-refs.ts";
export { checkSize, isSha256Digest, sha256Hex } from "./digest.ts";
