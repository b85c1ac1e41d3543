/** Adapts a pulled image (pull side) to the layer blobs the builder applies. */
import type { ContentStore, PulledImage } from "../pull/index.ts";
import type { LayerBlob } from "./apply-layer.ts";

/** The image's layers, lowest first, read from the content store (blobs there were verified on write). */
export function layerBlobsOf(image: PulledImage, store: ContentStore): LayerBlob[] {
  return image.layers.map((layer) => ({ digest: layer.digest, mediaType: layer.mediaType, size: layer.size, open: () => store.openRead(layer.digest) }));
}
