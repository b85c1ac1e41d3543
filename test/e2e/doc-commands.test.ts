/**
 * Every command a reader is told to run works as written. The ```sh blocks of README.md,
 * docs/imp-run.md and docs/install.md run in order, in the repository, with the PATH of the machine
 * (npx finds the project's Node.js itself, as it does for a newcomer) and `kubectl` from the set-up;
 * docs/install.md's against a real local control plane. A block that cannot run here (a real
 * cluster's registry, a command that runs until stopped, the test command itself) carries a marker
 * on the line before it, `<!-- not run by the docs test: why -->`, and is reported as skipped, why
 * and all. A failing block fails the test with its text and output.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import { findBinaries, startControlPlane, type ControlPlane } from "../../src/devcluster/index.ts";

const root = resolve(import.meta.dirname, "../..");
const MARKER = /^<!-- not run by the docs test: (.+) -->$/;
const BLOCK_TIMEOUT_MS = 10 * 60_000;

interface ShellBlock {
  readonly line: number;
  readonly text: string;
  /** Why it is not run; undefined: it runs. */
  readonly skip: string | undefined;
}

/** The ```sh / ```bash blocks of a Markdown file, with the marker before each, if any. */
export function shellBlocks(markdown: string): ShellBlock[] {
  const lines = markdown.split("\n");
  const blocks: ShellBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(sh|bash|shell)\s*$/.test(lines[i] ?? "")) continue;
    const end = lines.findIndex((l, j) => j > i && l.startsWith("```"));
    assert.ok(end > i, `unterminated block at line ${i + 1}`);
    const marker = MARKER.exec((lines[i - 1] ?? "").trim());
    blocks.push({ line: i + 1, text: lines.slice(i + 1, end).join("\n"), skip: marker?.[1] });
    i = end;
  }
  return blocks;
}

const setUp = existsSync(join(root, ".cache", "images", "busybox", "index.json")) && existsSync(join(root, ".cache", "bootkit", "current.json"));
const notSetUp = setUp ? false : "the machine is not set up (run `npm run setup`): the README's commands assume it";

// The machine's PATH as a newcomer has it, plus kubectl from the set-up (docs/install.md assumes one).
const machinePath = (process.env.PATH ?? "").split(":").filter((d) => !d.startsWith(join(root, "node_modules"))).join(":");

function runBlock(t: TestContext, file: string, block: ShellBlock, env: NodeJS.ProcessEnv): void {
  const started = performance.now();
  const run = spawnSync("bash", ["-euo", "pipefail", "-c", block.text], { cwd: root, env, encoding: "utf8", timeout: BLOCK_TIMEOUT_MS, maxBuffer: 64 << 20 });
  t.diagnostic(`${file}:${block.line} ran in ${((performance.now() - started) / 1000).toFixed(1)} s, exit ${run.status ?? run.signal}`);
  assert.equal(run.status, 0, `${file}:${block.line} does not work as written:\n${block.text}\n--- stdout\n${run.stdout.slice(-3000)}\n--- stderr\n${run.stderr.slice(-3000)}`);
}

describe("the docs' commands, as written", { skip: notSetUp, timeout: 3_600_000 }, () => {
  let kubectlDir: string;
  before(async () => {
    kubectlDir = dirname((await findBinaries()).kubectl);
  });

  for (const file of ["README.md", "docs/imp-run.md"]) {
    it(`${file}: every block runs or says why not`, (t) => {
      const blocks = shellBlocks(readFileSync(join(root, file), "utf8"));
      assert.ok(blocks.length > 0, `${file} has no shell block`);
      for (const block of blocks) {
        if (block.skip !== undefined) {
          t.diagnostic(`${file}:${block.line} not run: ${block.skip}`);
          continue;
        }
        runBlock(t, file, block, { ...process.env, PATH: `${kubectlDir}:${machinePath}` });
      }
      assert.ok(blocks.some((b) => b.skip === undefined), `${file}: no block runs here`);
    });
  }

  describe("docs/install.md against a real local control plane", () => {
    let plane: ControlPlane;
    before(async () => {
      plane = await startControlPlane({ controllerManager: true });
    });
    after(async () => {
      await plane?.stop();
    });

    it("docs/install.md: every block runs or says why not", (t) => {
      const file = "docs/install.md";
      const blocks = shellBlocks(readFileSync(join(root, file), "utf8"));
      for (const block of blocks) {
        if (block.skip !== undefined) {
          t.diagnostic(`${file}:${block.line} not run: ${block.skip}`);
          continue;
        }
        runBlock(t, file, block, { ...process.env, PATH: `${kubectlDir}:${machinePath}`, KUBECONFIG: plane.kubeconfigPath });
      }
      assert.ok(blocks.some((b) => b.skip === undefined), `${file}: no block runs here`);
    });
  });
});

describe("shellBlocks()", () => {
  it("finds sh blocks with the marker before them, and ignores other fences", () => {
    const md = ["# t", "```sh", "echo a", "```", "<!-- not run by the docs test: needs a cluster -->", "```bash", "kubectl x", "y", "```", "```", "plain", "```"].join("\n");
    assert.deepEqual(shellBlocks(md), [
      { line: 2, text: "echo a", skip: undefined },
      { line: 6, text: "kubectl x\ny", skip: "needs a cluster" },
    ]);
  });
});
