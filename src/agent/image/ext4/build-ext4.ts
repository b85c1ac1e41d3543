/**
 * Turns an unpacked rootfs directory into an ext4 image file with `mkfs.ext4 -d` (no mount, no loop
 * device), then adds device nodes, FIFOs and xattrs with `debugfs -w`. The image is sparse. mkfs runs
 * with the project's mke2fs.conf and an explicit feature list (mke2fs-config.ts).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";
import type { UnpackedRootfs } from "../layers/index.ts";
import { debugfsErrors, debugfsScript, type XattrFix } from "./debugfs-script.ts";
import { planExt4, type Ext4Params, type Ext4Plan } from "./fs-params.ts";
import { featureArg, mke2fsEnv } from "./mke2fs-config.ts";
import { runTool } from "./run-tool.ts";

export interface BuildExt4Options {
  readonly rootfs: UnpackedRootfs;
  /** The image file to create (must not exist). */
  readonly output: string;
  readonly params: Ext4Params;
  /** Filesystem UUID (derive it from the cache key for reproducible images). */
  readonly uuid?: string;
  readonly label?: string;
  /** A scratch directory for xattr value files. */
  readonly workDir: string;
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/** Builds the image; returns the plan it used. Throws `ToolFailed` / `Ext4FixupFailed`. */
export async function buildExt4(options: BuildExt4Options): Promise<Ext4Plan> {
  const { rootfs, params } = options;
  const plan = planExt4(rootfs, params);
  const timeoutMs = options.timeoutMs ?? 30 * 60 * 1000;
  // Our own config and an explicit feature list: the node's /etc/mke2fs.conf must not change the image.
  const features = ["-O", featureArg(params.journal)];
  const env = await mke2fsEnv(options.workDir);
  const ids = options.uuid === undefined ? [] : ["-U", options.uuid, "-E", `hash_seed=${options.uuid}`];
  const args = [
    "-q", "-F", "-t", "ext4", "-b", String(params.blockSize), "-I", String(params.inodeSize), "-N", String(plan.inodes), "-m", "0",
    ...features, "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", ...ids, "-L", options.label ?? "imp-base",
    "-d", rootfs.dir, options.output, `${plan.sizeBytes / 1024}k`,
  ];
  await runTool("mkfs.ext4", args, { timeoutMs, env, ...(options.signal === undefined ? {} : { signal: options.signal }) });
  await applyFixups(options, timeoutMs);
  return plan;
}

async function applyFixups(options: BuildExt4Options, timeoutMs: number): Promise<void> {
  const { rootfs } = options;
  if (rootfs.specials.size === 0 && rootfs.xattrs.size === 0) return;
  const dir = await mkdtemp(join(options.workDir, "debugfs-"));
  try {
    const fixes: XattrFix[] = [];
    for (const [path, attrs] of rootfs.xattrs) {
      for (const [name, value] of Object.entries(attrs)) {
        const valueFile = join(dir, `v${fixes.length}`);
        await writeFile(valueFile, value);
        fixes.push({ path, name, valueFile });
      }
    }
    const script = join(dir, "script");
    await writeFile(script, debugfsScript(rootfs.specials, fixes, rootfs.specialParentMtimes));
    const { stderr } = await runTool("debugfs", ["-w", "-f", script, options.output], { timeoutMs, ...(options.signal === undefined ? {} : { signal: options.signal }) });
    const errors = debugfsErrors(stderr);
    if (errors.length > 0) {
      throw terminalError("Ext4FixupFailed", `Cannot add device nodes and xattrs to ${options.output}: debugfs reported ${errors.slice(0, 5).join("; ")}`, {
        context: { output: options.output },
      });
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
