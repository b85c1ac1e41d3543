import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { buildImage, busyboxLayer } from "../../harness/oci-image.ts";
import { pushImage, startRegistry, type RunningRegistry } from "../../harness/registry.ts";
import { compress, tarBytes } from "../../fixtures/malicious-layers/tar-layer.ts";
import { debugfs } from "./ext4-inspect.ts";

const run = promisify(execFile);
const repo = join(import.meta.dirname, "..", "..", "..");
const imp = (...args: string[]): Promise<{ stdout: string; stderr: string }> => run(process.execPath, [join(repo, "src/cli/main.ts"), ...args]);

describe("imp image build / gc", () => {
  let work: string;
  let registry: RunningRegistry;
  before(async () => {
    work = await mkdtemp(join(tmpdir(), "imp-cli-build-"));
    registry = await startRegistry({ rootDir: join(work, "registry") });
    await pushImage(registry.url, "test/busybox", "1", buildImage([await busyboxLayer()]));
    await writeFile(join(work, "imp-guest"), "guest", { mode: 0o755 });
    await writeFile(join(work, "runner.tar.zst"), compress(await tarBytes([{ name: "opt/runner/run.sh", content: "#!/bin/sh\n", mode: 0o755 }]), "zstd"));
  });
  after(async () => {
    await registry.stop();
    await rm(work, { recursive: true, force: true });
  });

  const common = (): string[] => ["--store", join(work, "store"), "--cache", join(work, "cache")];

  it("pulls, applies an extra local layer, injects the guest agent, and caches the ext4 image", async () => {
    const args = ["image", "build", `${registry.host}/test/busybox:1`, ...common(), "--guest", join(work, "imp-guest"), "--layer", join(work, "runner.tar.zst")];
    const first = await imp(...args);
    assert.match(first.stdout, /built in/);
    const path = /image +(\S+)/.exec(first.stdout)?.[1];
    assert.ok(path !== undefined, first.stdout);
    assert.equal((await stat(path)).mode & 0o777, 0o444);
    assert.match(debugfs(path, "stat /bin/busybox"), /Mode: {2}0755/);
    assert.equal(debugfs(path, "cat /opt/runner/run.sh"), "#!/bin/sh\n");
    assert.equal(debugfs(path, "cat /.imp/imp-guest"), "guest");
    const second = await imp(...args);
    assert.match(second.stdout, /from cache/);
  });

  it("gc keeps images used within the grace period", async () => {
    const { stdout } = await imp("image", "gc", ...common().slice(2), "--max-bytes", "0");
    assert.doesNotMatch(stdout, /^evicted /m);
  });

  it("gc evicts unused images down to the limit", async () => {
    const { stdout } = await imp("image", "gc", ...common().slice(2), "--max-bytes", "0", "--grace-seconds", "0");
    assert.match(stdout, /^evicted [0-9a-f]{64}$/m);
    assert.match(stdout, /cache holds 0 B/);
  });
});

describe("bench/image-build.ts --smoke", () => {
  it("runs end to end and prints both tables", async () => {
    const { stdout } = await run(process.execPath, [join(repo, "bench/image-build.ts"), "--smoke"], { timeout: 300_000 });
    assert.match(stdout, /Cold build, .*\n\| run +\| imp ms/);
    assert.match(stdout, /\| median +\| \d+/);
    assert.match(stdout, /Per-VM disks on a warm cache/);
    assert.match(stdout, /\| small +\| \d+/);
  });
});
