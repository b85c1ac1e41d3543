/**
 * Images for VMs on this node: pull the image and its extra layers (content store shared by every
 * VM), build or reuse the cached ext4 base with the guest agent injected, and give a VM its disks.
 * Concurrent VMs of one image build it once (the cache's single flight).
 */
import { join } from "node:path";
import { BaseImages, ImageCache, type CachedImage } from "../image/cache/index.ts";
import { prepareVmDisks, ScratchTemplates, type VmDisks } from "../image/disks/index.ts";
import { layerBlobsOf, type LayerBlob } from "../image/layers/index.ts";
import { FsContentStore, parseLayoutReference, pullImage, type CredentialLookup, type PullProgress } from "../image/pull/index.ts";
import { terminalError, type Logger } from "../../shared/index.ts";

export interface VmImageRequest {
  readonly image: string;
  readonly extraLayers: readonly string[];
  readonly credentials?: CredentialLookup;
}

export interface VmImagesOptions {
  /** Where the content store, the image cache and scratch templates live (one filesystem with the VM dirs). */
  readonly root: string;
  readonly guestAgent: { readonly path: string; readonly digest: string };
  readonly cacheMaxBytes: number;
  readonly plainHttp?: (registry: string) => boolean;
  /**
   * Accept `oci:DIR` and `oci-archive:FILE` images from this machine's disk (`imp run`). A node agent
   * never does: its images come from the API, and a path there would name a file on the node.
   */
  readonly localLayouts?: boolean;
  readonly logger: Logger;
}

export class VmImages {
  readonly #options: VmImagesOptions;
  readonly #store: FsContentStore;
  readonly #bases: BaseImages;
  readonly cache: ImageCache;
  readonly #scratch: ScratchTemplates;

  private constructor(options: VmImagesOptions, store: FsContentStore, cache: ImageCache) {
    this.#options = options;
    this.#store = store;
    this.cache = cache;
    this.#bases = new BaseImages({ cache, logger: options.logger });
    this.#scratch = new ScratchTemplates(join(options.root, "scratch"));
  }

  static async open(options: VmImagesOptions): Promise<VmImages> {
    const store = await FsContentStore.open(join(options.root, "store"));
    const cache = await ImageCache.open({ root: join(options.root, "images"), maxBytes: options.cacheMaxBytes });
    return new VmImages(options, store, cache);
  }

  /**
   * Pulls `reference` into the content store (no base image is built): `imp run` does this first to
   * show the pull's progress; `ensure` then finds every blob in place.
   */
  async pull(reference: string, options: { readonly signal?: AbortSignal; readonly onProgress?: (event: PullProgress) => void } = {}): Promise<void> {
    this.#checkSource(reference);
    await pullImage(reference, { store: this.#store, ...options, ...(this.#options.plainHttp === undefined ? {} : { plainHttp: this.#options.plainHttp }) });
  }

  /** The cached base image for `request`, pulled and built when missing. */
  async ensure(request: VmImageRequest, signal?: AbortSignal): Promise<CachedImage> {
    const layers: LayerBlob[] = [];
    for (const reference of [request.image, ...request.extraLayers]) {
      this.#checkSource(reference);
      const pulled = await pullImage(reference, {
        store: this.#store,
        recordRefs: false,
        ...(signal === undefined ? {} : { signal }),
        ...(request.credentials === undefined ? {} : { auth: request.credentials }),
        ...(this.#options.plainHttp === undefined ? {} : { plainHttp: this.#options.plainHttp }),
      });
      layers.push(...layerBlobsOf(pulled, this.#store));
    }
    return this.#bases.ensure({ layers, guestAgent: this.#options.guestAgent }, signal === undefined ? {} : { signal });
  }

  #checkSource(reference: string): void {
    if (this.#options.localLayouts !== true && parseLayoutReference(reference) !== undefined) {
      throw terminalError("InvalidReference", `Cannot use image ${JSON.stringify(reference)}: images from local OCI layouts are for imp run; a node pulls from registries`);
    }
  }

  /** Base (hard link, read-only) and a fresh scratch disk in `vmDir`: O(1) in the image's size. */
  disks(vmDir: string, image: CachedImage, scratchBytes: number): Promise<VmDisks> {
    return prepareVmDisks(vmDir, image, this.#scratch, { sizeBytes: scratchBytes });
  }
}
