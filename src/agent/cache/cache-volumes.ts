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
import { link, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
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
  /**
   * The VM's own hard link to the generation it was cloned from (raw, read-only), beside the
   * clone: the VM's drive and its promotion name it as the backing file, and it keeps the
   * generation's bytes for as long as the clone lives, whatever the volume's collection removes.
   */
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

  /**
   * Links the volume's newest generation (made empty first if there is none) into `vmDir` and
   * clones it there: O(1) in the volume's size, and nothing of the VM's refers to the volume's
   * directory afterwards.
   */
  async cloneNewest(ref: CacheVolumeRef, vmDir: string, options: CacheToolOptions = {}): Promise<CacheClone> {
    const generation = join(vmDir, "cache-generation.raw");
    const clone = join(vmDir, "cache.qcow2");
    // A collection may remove the newest-but-two between the listing and the link: look again.
    for (let attempt = 1; ; attempt++) {
      const newest = (await this.newest(ref)) ?? (await this.#makeEmpty(ref));
      const linked = await link(newest, generation).then(
        () => true,
        (err: NodeJS.ErrnoException) => (err.code === "ENOENT" && attempt < 3 ? false : Promise.reject(err)),
      );
      if (linked) break;
    }
    await cloneGeneration(generation, clone, options);
    return { generation, clone };
  }

  /**
   * Keeps VM `uid`'s clone and its generation link past its VM (moved out of the VM's directory,
   * which is removed) until `settle` promotes or discards them. The record is written last, whole:
   * a crash before it leaves files the start-up sweep removes, never a record without its clone.
   */
  async hold(ref: CacheVolumeRef, uid: string, clone: CacheClone, nowMs: number): Promise<void> {
    if (!VM_UID.test(uid)) throw terminalError("CacheCloneFailed", `Cannot hold the cache clone of VM ${JSON.stringify(uid.slice(0, 80))}: not a VM id`);
    const held = join(this.dirOf(ref), "held");
    await mkdir(held, { recursive: true, mode: 0o700 });
    await rename(clone.clone, join(held, `${uid}.qcow2`));
    await rename(clone.generation, join(held, `${uid}.raw`));
    const record: HeldClone = { uid, ref: { namespace: ref.namespace, volume: ref.volume, sizeBytes: ref.sizeBytes }, generation: join(held, `${uid}.raw`), heldAtMs: nowMs };
    await writeFile(join(held, `${uid}.json.tmp`), JSON.stringify(record), { mode: 0o600 });
    await rename(join(held, `${uid}.json.tmp`), join(held, `${uid}.json`));
  }

  /** Every clone held on this node (from disk: held clones outlive an agent restart). */
  async held(): Promise<HeldClone[]> {
    const out: HeldClone[] = [];
    for (const dir of await this.#volumeDirs()) {
      for (const name of await readdir(join(dir, "held")).catch(() => [] as string[])) {
        if (!name.endsWith(".json")) continue;
        const record = await readFile(join(dir, "held", name), "utf8").then((t) => JSON.parse(t) as HeldClone, () => undefined);
        // Only a record that names its own files in the directory it was found in.
        if (record !== undefined && VM_UID.test(record.uid) && `${record.uid}.json` === name && record.generation === join(dir, "held", `${record.uid}.raw`)) {
          const found = this.#safeDirOf(record.ref);
          if (found === dir) {
            out.push(record);
            continue;
          }
        }
        await this.#removeHeld(join(dir, "held"), name.slice(0, -".json".length));
      }
    }
    return out;
  }

  /**
   * Settles a held clone: with `promoteAs`, it becomes generation `promoteAs` of its volume (then
   * generations beyond the newest two are removed); without, it is deleted. Returns the new
   * generation's path when promoted. A generation of that id already there is this promotion's own,
   * published before a crash (the id is the job's): taken as done.
   */
  async settle(held: HeldClone, promoteAs: string | undefined, options: CacheToolOptions = {}): Promise<string | undefined> {
    const dir = this.dirOf(held.ref);
    const heldDir = join(dir, "held");
    let promoted: string | undefined;
    if (promoteAs !== undefined) {
      const target = join(dir, generationFileName(promoteAs));
      const exists = await stat(target).then(() => true, () => false);
      promoted = exists ? target : await promoteClone(join(heldDir, `${held.uid}.qcow2`), join(heldDir, `${held.uid}.raw`), dir, promoteAs, options);
    }
    await this.#removeHeld(heldDir, held.uid);
    if (promoted !== undefined) await this.#collect(dir);
    return promoted;
  }

  /**
   * Removes generations beyond the newest KEEP_GENERATIONS. Every clone, running or held, reads
   * through its own hard link, so no VM loses its generation's bytes.
   */
  async #collect(dir: string): Promise<void> {
    const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => GENERATION.test(n)).sort();
    for (const name of names.slice(0, Math.max(0, names.length - KEEP_GENERATIONS))) await rm(join(dir, name), { force: true });
  }

  async #removeHeld(heldDir: string, uid: string): Promise<void> {
    for (const suffix of [".json", ".qcow2", ".raw", ".json.tmp"]) await rm(join(heldDir, `${uid}${suffix}`), { force: true });
  }

  #safeDirOf(ref: CacheVolumeRef): string | undefined {
    try {
      return this.dirOf(ref);
    } catch {
      return undefined;
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

  /**
   * Removes what a crash left in every volume directory: partial generations, and held files
   * without their record. For the agent's start only, before any clone or promotion runs.
   */
  async sweep(): Promise<string[]> {
    const removed: string[] = [];
    for (const dir of await this.#volumeDirs()) {
      removed.push(...(await sweepPartials(dir)).map((n) => join(dir, n)));
      const heldDir = join(dir, "held");
      const names = await readdir(heldDir).catch(() => [] as string[]);
      for (const name of names) {
        const uid = name.replace(/\.(json\.tmp|json|qcow2|raw)$/, "");
        if (name.endsWith(".json") || names.includes(`${uid}.json`)) continue;
        await rm(join(heldDir, name), { force: true });
        removed.push(join(heldDir, name));
      }
    }
    return removed;
  }

  /**
   * The volume's first, empty generation, made once however many VMs ask at once. Made without any
   * one caller's signal (mkfs is bounded by its own timeout): a VM stopped while it runs must not
   * fail the others waiting for it.
   */
  #makeEmpty(ref: CacheVolumeRef): Promise<string> {
    const dir = this.dirOf(ref);
    const pending = this.#making.get(dir);
    if (pending !== undefined) return pending;
    const made = createEmptyGeneration(dir, EMPTY_GENERATION_ID, ref.sizeBytes)
      .catch(async (err: unknown) => {
        // Made meanwhile by another process: use that one.
        const existing = await this.newest(ref);
        if (existing !== undefined) return existing;
        throw err;
      })
      .finally(() => this.#making.delete(dir));
    this.#making.set(dir, made);
    this.emptyGenerationsMade++;
    return made;
  }

  /** How many empty generations this instance started making (tests: one per volume, however many ask). */
  emptyGenerationsMade = 0;
}
