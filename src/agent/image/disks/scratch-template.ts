/**
 * Empty ext4 scratch disks without running mkfs per VM. One template per (size, parameters) is made
 * once with mkfs.ext4 into a sparse file; a VM's scratch disk is then a reflink clone of it
 * (FICLONE, on XFS/btrfs) or, where the filesystem cannot clone (ext4), a new sparse file of the same
 * size into which only the template's non-zero blocks are written (a few hundred KiB held in memory,
 * found once with FIEMAP via `filefrag`). Either way the cost does not depend on the image or on the
 * scratch size beyond its metadata.
 */
import { createHash, randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { copyFile, mkdir, open, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import { featureArg, mke2fsEnv, runTool } from "../ext4/index.ts";

export interface ScratchSpec {
  readonly sizeBytes: number;
  /** Journal on (default) keeps the guest's writable layer consistent across a guest crash within its life. */
  readonly journal?: boolean;
}

interface Template {
  readonly path: string;
  readonly sizeBytes: number;
  /** Non-zero regions of the template, to write into a fresh sparse file. */
  readonly chunks: readonly { readonly offset: number; readonly data: Buffer }[];
}

const BLOCK = 4096;

export interface ScratchTemplatesOptions {
  /**
   * Ready-made scratch disks kept per size, refilled in the background after each use, so that
   * preparing a VM costs one rename instead of a file creation, a truncate and writes. Default 2; 0
   * disables. Spares are files of this process (removed by `sweep()` when stale).
   */
  readonly spares?: number;
}

export type ScratchMethod = "spare" | "cloned" | "sparse";

export class ScratchTemplates {
  readonly root: string;
  readonly #templates = new Map<string, Promise<Template>>();
  readonly #spares = new Map<string, string[]>();
  readonly #refilling = new Set<string>();
  readonly #wantSpares: number;
  #cloneWorks: boolean | undefined;
  #swept: Promise<void> | undefined;

  /** `root` holds the templates and spares; it must be on the filesystem of the VM directories. */
  constructor(root: string, options: ScratchTemplatesOptions = {}) {
    this.root = root;
    this.#wantSpares = options.spares ?? 2;
  }

  /**
   * Creates the scratch disk file `dest` (which must not exist) as an empty ext4 of `spec.sizeBytes`:
   * a spare renamed into place when one is ready, else a clone or sparse copy of the template.
   */
  async create(dest: string, spec: ScratchSpec): Promise<ScratchMethod> {
    const name = templateName(spec);
    const spare = this.#spares.get(name)?.pop();
    if (spare !== undefined) {
      this.#refill(name, spec);
      try {
        await rename(spare, dest);
        return "spare";
      } catch {
        await rm(spare, { force: true });
      }
    }
    const method = await this.#fresh(dest, spec);
    this.#refill(name, spec);
    return method;
  }

  /** Waits until the spares of `spec` are made (for tests and warm-up); never throws. */
  async warm(spec: ScratchSpec): Promise<void> {
    this.#refill(templateName(spec), spec);
    while (this.#refilling.has(templateName(spec))) await new Promise((r) => setTimeout(r, 5));
  }

  async #fresh(dest: string, spec: ScratchSpec): Promise<"cloned" | "sparse"> {
    const template = await this.#template(spec);
    if (this.#cloneWorks !== false) {
      try {
        await copyFile(template.path, dest, constants.COPYFILE_EXCL | constants.COPYFILE_FICLONE_FORCE);
        this.#cloneWorks = true;
        return "cloned";
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "EEXIST") throw err;
        this.#cloneWorks = false;
      }
    }
    const handle = await open(dest, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    try {
      await handle.truncate(template.sizeBytes);
      for (const chunk of template.chunks) await handle.write(chunk.data, 0, chunk.data.length, chunk.offset);
    } finally {
      await handle.close();
    }
    return "sparse";
  }

  /** Tops the spares of `name` up in the background; one refill per size at a time. */
  #refill(name: string, spec: ScratchSpec): void {
    if (this.#wantSpares === 0 || this.#refilling.has(name)) return;
    this.#refilling.add(name);
    void (async () => {
      try {
        this.#swept ??= this.#sweep();
        await this.#swept;
        const list = this.#spares.get(name) ?? [];
        this.#spares.set(name, list);
        await mkdir(join(this.root, "spare"), { recursive: true, mode: 0o700 });
        while (list.length < this.#wantSpares) {
          const path = join(this.root, "spare", `${process.pid}-${name}-${randomBytes(4).toString("hex")}.ext4`);
          await this.#fresh(path, spec);
          list.push(path);
        }
      } catch {
        // A failed refill only costs speed: create() makes disks inline when no spare is ready.
      } finally {
        this.#refilling.delete(name);
      }
    })();
  }

  /** Removes spares left by earlier processes (their bookkeeping died with them). */
  async #sweep(): Promise<void> {
    const dir = join(this.root, "spare");
    for (const file of await readdir(dir).catch(() => [])) {
      if (!file.startsWith(`${process.pid}-`)) await rm(join(dir, file), { force: true });
    }
  }

  #template(spec: ScratchSpec): Promise<Template> {
    const name = templateName(spec);
    let found = this.#templates.get(name);
    if (found === undefined) {
      found = this.#makeTemplate(name, spec);
      found.catch(() => this.#templates.delete(name));
      this.#templates.set(name, found);
    }
    return found;
  }

  async #makeTemplate(name: string, spec: ScratchSpec): Promise<Template> {
    if (!Number.isInteger(spec.sizeBytes) || spec.sizeBytes < 16 * 1024 ** 2 || spec.sizeBytes % BLOCK !== 0) {
      throw terminalError("BadScratchSize", `Cannot make a scratch disk of ${spec.sizeBytes} bytes: it must be a multiple of 4096 and at least 16 MiB`);
    }
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    const path = join(this.root, `scratch-${name}.ext4`);
    if ((await stat(path).catch(() => undefined)) === undefined) {
      const temp = `${path}.${process.pid}.${randomBytes(4).toString("hex")}`;
      try {
        const handle = await open(temp, "wx", 0o600);
        await handle.truncate(spec.sizeBytes);
        await handle.close();
        // Pinned like base images (ext4/mke2fs-config.ts): the node's mke2fs.conf does not decide.
        const journal = ["-O", featureArg(spec.journal !== false)];
        const env = await mke2fsEnv(this.root);
        const uuid = createHash("sha256").update(name).digest("hex");
        await runTool("mkfs.ext4", ["-q", "-F", "-t", "ext4", "-b", String(BLOCK), "-m", "0", ...journal, "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-U", `${uuid.slice(0, 8)}-${uuid.slice(8, 12)}-4${uuid.slice(13, 16)}-a${uuid.slice(17, 20)}-${uuid.slice(20, 32)}`, "-L", "imp-scratch", temp], { timeoutMs: 120_000, env });
        await rename(temp, path);
      } finally {
        await rm(temp, { force: true });
      }
    }
    return { path, sizeBytes: spec.sizeBytes, chunks: await nonZeroChunks(path) };
  }
}

/** `v2`: made with the pinned mke2fs config and features (older templates are not reused). */
const templateName = (spec: ScratchSpec): string => `v2-${spec.sizeBytes}-${spec.journal === false ? "nojournal" : "journal"}`;

/** The non-zero 4 KiB-aligned regions of a sparse file, read through its FIEMAP extents. */
async function nonZeroChunks(path: string): Promise<{ offset: number; data: Buffer }[]> {
  const { stdout } = await runTool("filefrag", ["-e", "-b4096", path], { timeoutMs: 60_000 });
  const chunks: { offset: number; data: Buffer }[] = [];
  const handle = await open(path, "r");
  try {
    for (const line of stdout.split("\n")) {
      const m = /^\s*\d+:\s+(\d+)\.\.\s*(\d+):/.exec(line);
      if (m === null) continue;
      const start = Number(m[1]) * BLOCK;
      const length = (Number(m[2]) - Number(m[1]) + 1) * BLOCK;
      const data = Buffer.alloc(length);
      await handle.read(data, 0, length, start);
      for (let at = 0; at < length; at += BLOCK) {
        const block = data.subarray(at, at + BLOCK);
        if (block.every((b) => b === 0)) continue;
        const last = chunks[chunks.length - 1];
        if (last !== undefined && last.offset + last.data.length === start + at) last.data = Buffer.concat([last.data, block]);
        else chunks.push({ offset: start + at, data: Buffer.from(block) });
      }
    }
  } finally {
    await handle.close();
  }
  return chunks;
}

