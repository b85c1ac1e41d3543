/**
 * Real workloads: the Docker runner image (images/docker-runner, over a gigabyte unpacked) beside the
 * small test runner image (busybox + the runner program), on the real runner path (one node, QEMU
 * under TCG here), side by side in one run:
 *   - the node's first VM of each image: pull + ext4 base image build (cold image cache), then every
 *     later VM: the per-VM disks only (warm cache) — the agent's prepareDurationMs;
 *   - VMM boot (spawn → guest hello), and for the Docker image dockerd ready, counted from the
 *     kernel's start (the job reads what the image's entry point wrote);
 *   - job startup, queued → running, with the image cache cold (first VM) and warm;
 *   - memory: the QEMU process's resident set of an idle runner VM of each image;
 *   - the Docker image again in a class that starts from a memory snapshot (`docker-snap`): its
 *     first job boots while the node builds the template (dockerd started by the image's warm-up
 *     before the save), later jobs run in restored VMs that find dockerd answering.
 *
 *   node bench/docker-job.ts [--rounds 3]
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import type { ImpVM } from "../src/api/index.ts";
import { waitFor } from "../src/shared/index.ts";
import { dockerWorldUnavailable, nameOf, RunnerWorld } from "../test/e2e/runner-path/world.ts";
import { processesMentioning } from "../test/harness/node-agent.ts";
import { median, table } from "./stats.ts";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "3" } } });
const rounds = Number(values.rounds);
const why = await dockerWorldUnavailable();
if (why !== undefined) {
  process.stdout.write(`bench:docker: cannot run on this machine: ${why}\n`);
  process.exit(1);
}

type Image = "small" | "docker" | "docker-snap";
const IMAGES: readonly Image[] = ["small", "docker", "docker-snap"];
interface Sample {
  readonly image: Image;
  readonly round: number;
  readonly prepareMs: number;
  readonly bootMs: number;
  readonly startupMs: number;
  readonly dockerReadyS: number | undefined;
  readonly startedFrom: string;
}
const samples: Sample[] = [];
const rss: Record<Image, number[]> = { small: [], docker: [], "docker-snap": [] };
const LABELS: Record<Image, string[]> = { small: ["self-hosted", "imp", "small"], docker: ["self-hosted", "imp", "docker"], "docker-snap": ["self-hosted", "imp", "docker-snap"] };
const DOCKER_STEP = "cat /run/imp-docker-ready; docker info --format '{{.Driver}}'";
const STEP: Record<Image, string> = { small: "echo hi", docker: DOCKER_STEP, "docker-snap": DOCKER_STEP };
const shape = (image: Image, minIdle: number) => ({ minIdle, maxConcurrent: 1, labels: LABELS[image], docker: image !== "small", snapshot: image === "docker-snap" });

const world = await RunnerWorld.start({ nodes: 1, docker: true, say: (line) => process.stdout.write(`  ${line}\n`) });
const onSignal = (): void => void world.dispose().finally(() => process.exit(130));
process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
const ofPool = (vms: ImpVM[], pool: string): ImpVM[] => vms.filter((vm) => vm.metadata.labels?.["imp.dev/pool"] === pool);
try {
  for (const image of IMAGES) await world.applyPool(image, shape(image, 0));
  for (let round = 1; round <= rounds; round++) {
    for (const image of IMAGES) {
      await waitFor(`no VM of ${image}`, async () => (ofPool(await world.listVms(), image).length === 0 ? true : undefined), { timeoutMs: 300_000, intervalMs: 200 });
      const job = world.queueJob(`${image}-${round}`, [{ name: "step", run: STEP[image] }], LABELS[image]);
      await world.waitForJob(job, "completed", 900_000);
      if (job.conclusion !== "success") throw new Error(`${job.name}: ${job.conclusion ?? "?"}: ${job.result?.log ?? ""}`);
      const vm = world.history(job.runnerName ?? "")?.last;
      const ready = /dockerd ready in \d+ ms; ([\d.]+) s after the kernel started/.exec(job.result?.log ?? "")?.[1];
      samples.push({ image, round, prepareMs: vm?.status?.prepareDurationMs ?? Number.NaN, bootMs: vm?.status?.bootDurationMs ?? Number.NaN, startupMs: (job.startedAt ?? Number.NaN) - job.queuedAt, dockerReadyS: ready === undefined ? undefined : Number(ready), startedFrom: vm?.status?.startedFrom ?? "?" });
      const s = samples.at(-1);
      process.stdout.write(`  ${job.name}: ${s?.startedFrom}, prepare ${s?.prepareMs} ms, boot ${s?.bootMs} ms, startup ${s?.startupMs} ms${s?.dockerReadyS === undefined ? "" : `, dockerd ready ${s.dockerReadyS} s after the kernel started`}\n`);
    }
  }
  // An idle runner VM of each image: the QEMU process's resident memory once its runner waits.
  for (const image of IMAGES) {
    await world.applyPool(image, shape(image, 1));
    const vm = await world.waitForVm(`an idle ${image} runner`, (vms) => ofPool(vms, image).find((v) => v.status?.phase === "Running" && world.github.runnerNamed(nameOf(v))?.status === "online"), 900_000);
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 2_000)); // sampling interval, not a wait for an event
      for (const pid of await processesMentioning(vm.metadata.uid ?? "", "qemu")) {
        const kb = Number(/VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, "utf8").catch(() => ""))?.[1] ?? Number.NaN);
        if (Number.isFinite(kb)) rss[image].push(kb / 1024);
      }
    }
    await world.applyPool(image, shape(image, 0));
  }
} finally {
  await world.dispose();
}

const rows = IMAGES.map((image) => {
  const of = samples.filter((s) => s.image === image);
  const first = of.find((s) => s.round === 1);
  // Warm cache; for docker-snap, the jobs whose VM was restored (a booted one is in the "jobs" count only).
  const later = of.filter((s) => s.round > 1 && (image !== "docker-snap" || s.startedFrom === "Snapshot"));
  const ready = of.map((s) => s.dockerReadyS).filter((x): x is number => x !== undefined);
  return [
    image,
    `${of.length} (${of.filter((s) => s.startedFrom === "Snapshot").length} restored)`,
    first?.prepareMs ?? Number.NaN,
    median(later.map((s) => s.prepareMs)),
    median(of.map((s) => s.bootMs)),
    ready.length === 0 ? "–" : `${median(ready).toFixed(1)} s`,
    first?.startupMs ?? Number.NaN,
    median(later.map((s) => s.startupMs)),
    rss[image].length === 0 ? Number.NaN : Math.round(median(rss[image])),
  ];
});
table(
  `The Docker runner image beside the small one (${rounds} jobs each, cold pools, one node; ${world.kernelLabel})`,
  ["image", "jobs", "prepare, cold cache ms", "prepare, warm p50 ms", "VMM boot p50 ms", "dockerd ready after kernel start p50", "startup, cold cache ms", "startup, warm cache p50 ms", "idle VM QEMU RSS MiB"],
  rows,
);
/** Warm-cache medians; docker-snap's only over the jobs whose VM was restored. */
const m = (image: Image, f: (s: Sample) => number): number => median(samples.filter((s) => s.image === image && s.round > 1 && (image !== "docker-snap" || s.startedFrom === "Snapshot")).map(f));
process.stdout.write(`\ndocker-snap/docker (warm cache, medians): startup ${(m("docker-snap", (s) => s.startupMs) / m("docker", (s) => s.startupMs)).toFixed(2)}×, idle RSS ${(median(rss["docker-snap"]) / median(rss.docker)).toFixed(2)}×\n`);
process.stdout.write(`docker/small ratios (warm cache, medians): startup ${(m("docker", (s) => s.startupMs) / m("small", (s) => s.startupMs)).toFixed(2)}×, prepare ${(m("docker", (s) => s.prepareMs) / m("small", (s) => s.prepareMs)).toFixed(2)}×, idle RSS ${(median(rss.docker) / median(rss.small)).toFixed(2)}×\n`);
