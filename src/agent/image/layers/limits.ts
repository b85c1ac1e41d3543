/**
 * Bounds that stop a hostile layer from exhausting the node: a decompression bomb, a tar with millions
 * of tiny entries, or one that never ends. The builder checks them while it streams, so a layer that
 * crosses a bound fails after at most one bound's worth of work, never after unpacking all of it.
 */
import { Transform, type TransformCallback } from "node:stream";
import { terminalError } from "../../../shared/index.ts";

export interface LayerLimits {
  /** Uncompressed tar bytes, summed over every layer of one image. */
  readonly maxUncompressedBytes: number;
  /** Tar entries, summed over every layer of one image. */
  readonly maxEntries: number;
  /** Largest uncompressed/compressed ratio allowed once `ratioFloorBytes` have been decompressed. */
  readonly maxRatio: number;
  /** Below this many uncompressed bytes of a layer the ratio is not checked (small layers compress well). */
  readonly ratioFloorBytes: number;
  /**
   * The same ratio over the whole image (all layers so far), checked once the image has produced this
   * many uncompressed bytes. Smaller than `ratioFloorBytes`, so many layers that each stay just under
   * the per-layer floor cannot add up to a bomb.
   */
  readonly imageRatioFloorBytes: number;
}

/** Generous for real images (the largest common CI images are ~20 GiB unpacked, ~500k files). */
export function defaultLayerLimits(): LayerLimits {
  return {
    maxUncompressedBytes: 64 * 1024 ** 3,
    maxEntries: 2_000_000,
    maxRatio: 200,
    ratioFloorBytes: 256 * 1024 ** 2,
    imageRatioFloorBytes: 64 * 1024 ** 2,
  };
}

/**
 * How many uncompressed bytes an image may unpack to in a staging directory with `freeBytes` free:
 * the free space less `reserveBytes` (left for everything else on that filesystem), halved when the
 * finished ext4 file is written to the same filesystem (disk staging). Never negative.
 */
export function stagingCapBytes(freeBytes: number, reserveBytes: number, outputOnSameFs: boolean): number {
  const usable = Math.max(0, freeBytes - reserveBytes);
  return Math.floor(outputOnSameFs ? usable / 2 : usable);
}

/** Running totals for one image build; shared by all its layers. */
export class LayerBudget {
  readonly limits: LayerLimits;
  uncompressedBytes = 0;
  compressedBytes = 0;
  entries = 0;

  constructor(limits: LayerLimits) {
    this.limits = limits;
  }

  /** Counts one tar entry; throws `LayerTooManyEntries` past the limit. */
  countEntry(layer: string): void {
    this.entries++;
    if (this.entries > this.limits.maxEntries) {
      throw terminalError("LayerTooManyEntries", `Cannot apply layer ${layer}: the image has more than ${this.limits.maxEntries} entries`, {
        context: { layer, maxEntries: this.limits.maxEntries },
      });
    }
  }

  /**
   * A pair of pass-through streams to put before and after the decompressor: the first counts
   * compressed bytes, the second counts uncompressed bytes and fails the pipeline on a bound.
   */
  meter(layer: string): { readonly compressed: Transform; readonly uncompressed: Transform } {
    let compressedBytes = 0;
    let layerBytes = 0;
    const compressed = new Transform({
      transform: (chunk: Buffer, _enc, done: TransformCallback) => {
        compressedBytes += chunk.length;
        this.compressedBytes += chunk.length;
        done(null, chunk);
      },
    });
    const uncompressed = new Transform({
      transform: (chunk: Buffer, _enc, done: TransformCallback) => {
        layerBytes += chunk.length;
        this.uncompressedBytes += chunk.length;
        if (this.uncompressedBytes > this.limits.maxUncompressedBytes) {
          done(terminalError("LayerTooLarge", `Cannot apply layer ${layer}: the image unpacks to more than ${this.limits.maxUncompressedBytes} bytes`, {
            context: { layer, maxUncompressedBytes: this.limits.maxUncompressedBytes },
          }));
          return;
        }
        if (layerBytes > this.limits.ratioFloorBytes && layerBytes > compressedBytes * this.limits.maxRatio) {
          done(terminalError("LayerCompressionRatio", `Cannot apply layer ${layer}: it expands more than ${this.limits.maxRatio}x (${layerBytes} bytes from ${compressedBytes}); refusing a likely decompression bomb`, {
            context: { layer, maxRatio: this.limits.maxRatio },
          }));
          return;
        }
        const image = this.uncompressedBytes;
        if (image > this.limits.imageRatioFloorBytes && image > this.compressedBytes * this.limits.maxRatio) {
          done(terminalError("LayerCompressionRatio", `Cannot apply layer ${layer}: the image's layers together expand more than ${this.limits.maxRatio}x (${image} bytes from ${this.compressedBytes}); refusing a likely decompression bomb spread over layers`, {
            context: { layer, maxRatio: this.limits.maxRatio },
          }));
          return;
        }
        done(null, chunk);
      },
    });
    return { compressed, uncompressed };
  }
}
