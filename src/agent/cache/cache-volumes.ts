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
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { terminalError } from "../../shared/index.ts";
import { cloneGeneration, createEmptyGeneration, generationFileName, promoteClone, sweepPartials, type CacheToolOptions } from "./cache-volume.ts";

const SEGMENT = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const GENERATION = /^gen-([a-z0-9-]{1,63})\.raw$/;
/** Ids sort in the order generations were made: the first is the empty one. */
const EMPTY_GENERATION_ID = "0000000000000-empty";
/** Generations kept per volume besides those a held clone reads through to: the newest and the one before. */
const KEEP_GENERATIONS = 2;
const VM_UID = /^[a-z0-9][a-z0-9-]{0,63}$/;

/** A clone kept after its VM ended, until the operator's decision (or its absence) settles it. */
export interface HeldClone {
  readonly uid: string;
  readonly ref: CacheVolumeRef;
  readonly generation: string;
  readonly heldAtMs: number;
}

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

  /**
   * Keeps VM `uid`'s clone past its VM (moved out of the VM's directory, which is removed) until
   * `settle` promotes or discards it. Called as the VM's disks are released.
   */
  async hold(ref: CacheVolumeRef, uid: string, clone: CacheClone, nowMs: number): Promise<void> {
    if (!VM_UID.test(uid)) throw terminalError("CacheCloneFailed", `Cannot hold the cache clone of VM ${JSON.stringify(uid.slice(0, 80))}: not a VM id`);
    const held = join(this.dirOf(ref), "held");
    await mkdir(held, { recursive: true, mode: 0o700 });
    const record: HeldClone = { uid, ref: { namespace: ref.namespace, volume: ref.volume, sizeBytes: ref.sizeBytes }, generation: clone.generation, heldAtMs: nowMs };
    // The record first, whole (renamed into place), then the clone: a crash between leaves a record
    // whose clone is missing (settled as a discard), never a clone nothing records.
    await writeFile(join(held, `${uid}.json.tmp`), JSON.stringify(record), { mode: 0o600 });
    await rename(join(held, `${uid}.json.tmp`), join(held, `${uid}.json`));
    await rename(clone.clone, join(held, `${uid}.qcow2`));
  }

  /** Every clone held on this node (from disk: held clones outlive an agent restart). */
  async held(): Promise<HeldClone[]> {
    const out: HeldClone[] = [];
    for (const dir of await this.#volumeDirs()) {
      for (const name of await readdir(join(dir, "held")).catch(() => [] as string[])) {
        if (!name.endsWith(".json")) continue;
        const record = await readFile(join(dir, "held", name), "utf8").then((t) => JSON.parse(t) as HeldClone, () => undefined);
        if (record !== undefined && VM_UID.test(record.uid) && `${record.uid}.json` === name) out.push(record);
      }
    }
    return out;
  }

  /**
   * Settles a held clone: with `promoteAs`, it becomes generation `promoteAs` of its volume (then
   * older generations no held clone needs are removed); without, it is deleted. Returns the new
   * generation's path when promoted.
   */
  async settle(held: HeldClone, promoteAs: string | undefined, options: CacheToolOptions = {}): Promise<string | undefined> {
    const dir = this.dirOf(held.ref);
    const clone = join(dir, "held", `${held.uid}.qcow2`);
    let promoted: string | undefined;
    if (promoteAs !== undefined) promoted = await promoteClone(clone, dir, promoteAs, options);
    await rm(clone, { force: true });
    await rm(join(dir, "held", `${held.uid}.json`), { force: true });
    if (promoted !== undefined) await this.#collect(dir);
    return promoted;
  }

  /** Removes generations beyond the newest KEEP_GENERATIONS that no held clone reads through to. */
  async #collect(dir: string): Promise<void> {
    const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => GENERATION.test(n)).sort();
    const needed = new Set((await this.held()).map((h) => basename(h.generation)).filter((g) => dirname(join(dir, g)) === dir));
    for (const name of names.slice(0, Math.max(0, names.length - KEEP_GENERATIONS))) {
      // A running VM's QEMU keeps its generation open: unlinking it does not take it away.
      if (!needed.has(name)) await rm(join(dir, name), { force: true });
    }
  }

  async #volumeDirs(): Promise<string[]> {
    const dirs: string[] = [];
    for (const ns of await readdir(this.#root).catch(() => [] as string[])) {
      for (const volume of await readdir(join(this.#root, ns)).catch(() => [] as string[])) {
        for (const size of await readdir(join(this.#root, ns, volume)).catch(() => [] as string[])) dirs.push(join(this.#root, ns, volume, size));
      }
    }
    return dirs;
  }

  /** Removes what a crash left in every volume directory (partial generations); for the agent's start only. */
  async sweep(): Promise<string[]> {
    const removed: string[] = [];
    for (const dir of await this.#volumeDirs()) removed.push(...(await sweepPartials(dir)).map((n) => join(dir, n)));
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
