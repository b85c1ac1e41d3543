/** The node's base-image cache: keys, single-flight builds, atomic publish, LRU eviction. */
export { BaseImages, type BaseImageRequest, type BaseImagesOptions, type BuildEvent } from "./base-images.ts";
export { baseImageKey, BUILDER_FORMAT_VERSION, uuidOfKey, type BaseImageKeyInput } from "./cache-key.ts";
export { fileDigestOf } from "../layers/index.ts";
export { acquireFileLock, type HeldLock } from "./file-lock.ts";
export { DEFAULT_EVICTION_GRACE_MS, IMAGE_FILE, ImageCache, type CachedImage, type CacheEntry, type EnsureResult, type GcResult, type ImageCacheOptions, type ImageProducer } from "./image-cache.ts";
export { defaultStaging, type StagingOptions } from "./staging.ts";
