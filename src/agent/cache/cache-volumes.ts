/**
 * The node's cache volumes: `<stateDir>/caches/<namespace>/<volume>/<size in bytes>/`, each holding
 * that volume's generations (`gen-<id>.raw`). A VM asks for a clone of the newest one; a volume
 * this node has never held starts with an empty generation, made once however many VMs ask at once.
 *
 * The namespace is the VM's own and the volume a name the API checked (a pool sets its UID), both
 * checked again here as plain path segments: one namespace's VM cannot name another's directory.
 * A size is a directory of its own, so a pool whose size changed starts a new, empty cache rather
 * than give a VM a clone of a different size than asked.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../shared/index.ts";
import { cloneGeneration, createEmptyGeneration, generationFileName, sweepPartials, type CacheToolOptions } from "./cache-volume.ts";

const SEGMENT = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const GENERATION = /^gen-([a-z0-9-]{1,63})\.raw$/;
/** Ids sort in the order generations were made: the first is the empty one. */
const EMPTY_GENERATION_ID = "0000000000000-empty";

export interface CacheVolumeRef {
  readonly namespace: string;
  readonly volume: string;
  readonly sizeBytes: number;
}

export interface CacheClone {
  /** The generation the clone reads through to (raw, read-only): the VM's drive names it as its backing file. */
  readonly generation: string;
  /** The VM's own qcow2 file. */
  readonly clone: string;
}

export class CacheVolumes {
  readonly #root: string;
  /** One empty generation made at a time per volume directory; later callers wait and reuse it. */
  readonly #making = new Map<string, Promise<string>>();

  constructor(stateDir: string) {
    this.#root = join(stateDir, "caches");
  }

  /** The directory of a volume at one size. Throws a terminal CacheCloneFailed for a name that is not a plain segment. */
  dirOf(ref: CacheVolumeRef): string {
    for (const [what, value] of [["namespace", ref.namespace], ["volume", ref.volume]] as const) {
      if (!SEGMENT.test(value)) throw terminalError("CacheCloneFailed", `Cannot use cache ${what} ${JSON.stringify(value.slice(0, 80))}: it must be a DNS label`);
    }
    if (!Number.isSafeInteger(ref.sizeBytes) || ref.sizeBytes <= 0) throw terminalError("CacheCloneFailed", `Cannot use a cache volume of ${ref.sizeBytes} bytes`);
    return join(this.#root, ref.namespace, ref.volume, String(ref.sizeBytes));
  }

  /** The path of the volume's newest generation, or undefined when this node has none. */
  async newest(ref: CacheVolumeRef): Promise<string | undefined> {
    const dir = this.dirOf(ref);
    const ids = (await readdir(dir).catch(() => [] as string[])).flatMap((n) => GENERATION.exec(n)?.[1] ?? []).sort();
    const last = ids.at(-1);
    return last === undefined ? undefined : join(dir, generationFileName(last));
  }

  /** Clones the volume's newest generation (made empty first if there is none) into `clonePath`. */
  async cloneNewest(ref: CacheVolumeRef, clonePath: string, options: CacheToolOptions = {}): Promise<CacheClone> {
    const generation = (await this.newest(ref)) ?? (await this.#makeEmpty(ref, options));
    await cloneGeneration(generation, clonePath, options);
    return { generation, clone: clonePath };
  }

  /** Removes what a crash left in every volume directory (partial generations); for the agent's start only. */
  async sweep(): Promise<string[]> {
    const removed: string[] = [];
    for (const ns of await readdir(this.#root).catch(() => [] as string[])) {
      for (const volume of await readdir(join(this.#root, ns)).catch(() => [] as string[])) {
        for (const size of await readdir(join(this.#root, ns, volume)).catch(() => [] as string[])) {
          const dir = join(this.#root, ns, volume, size);
          removed.push(...(await sweepPartials(dir)).map((n) => join(dir, n)));
        }
      }
    }
    return removed;
  }

  #makeEmpty(ref: CacheVolumeRef, options: CacheToolOptions): Promise<string> {
    const dir = this.dirOf(ref);
    const pending = this.#making.get(dir);
    if (pending !== undefined) return pending;
    const made = createEmptyGeneration(dir, EMPTY_GENERATION_ID, ref.sizeBytes, options)
      .catch(async (err: unknown) => {
        // Made meanwhile by an earlier agent run's VM (or another process): use that one.
        const existing = await this.newest(ref);
        if (existing !== undefined) return existing;
        throw err;
      })
      .finally(() => this.#making.delete(dir));
    this.#making.set(dir, made);
    return made;
  }
}
