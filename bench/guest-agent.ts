/**
 * The guest protocol's own cost, without a VM: the real Go agent as an ordinary process
 * (--mode=process) on a Unix socket, driven by the TypeScript GuestClient. Measures request
 * round trips (hello, exec.status), exec start-to-exit of /bin/true, and stdout throughput
 * through output events (32 KiB chunks, base64, schema-checked on the host).
 *
 *   node bench/guest-agent.ts [--rounds 200] [--mib 64]
 */
import { spawn } from "node:child_process";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createConnection } from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { waitFor } from "../src/shared/index.ts";
import { GuestClient, type ExitEvent } from "../src/agent/index.ts";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "200" }, mib: { type: "string", default: "64" } } });
const rounds = Number(values.rounds);
const mib = Number(values.mib);
const root = resolve(import.meta.dirname, "..");
const bin = process.env.IMP_GUEST_BIN ?? execFileSync("bash", [join(root, "scripts/setup.d/30-guest.sh")], { encoding: "utf8" }).trim().split("\n").at(-1) ?? "";

const dir = mkdtempSync(join(tmpdir(), "imp-bench-guest-"));
const sock = join(dir, "agent.sock");
const agent = spawn(bin, ["--mode=process", "--listen-unix", sock, "--log-level", "warn"], { stdio: "ignore" });
try {
  await waitFor("the agent socket", () => (existsSync(sock) ? true : undefined), { timeoutMs: 20_000, intervalMs: 20 });
  const socket = createConnection(sock);
  await once(socket, "connect");
  const client = new GuestClient(socket, { requestTimeoutMs: 60_000 });
  const exitOf = (execId: string): Promise<ExitEvent> =>
    new Promise((done) => {
      const on = (e: ExitEvent): void => {
        if (e.execId === execId) {
          client.off("exit", on);
          done(e);
        }
      };
      client.on("exit", on);
    });

  const time = async (fn: (i: number) => Promise<unknown>): Promise<number[]> => {
    const samples: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const start = performance.now();
      await fn(i);
      samples.push(performance.now() - start);
    }
    return samples.sort((a, b) => a - b);
  };
  const pct = (s: number[], p: number): string => (s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? NaN).toFixed(3);

  const hello = await time(() => client.hello());
  await client.exec({ execId: "status-target", argv: ["/bin/true"], env: {} });
  const status = await time(() => client.execStatus("status-target"));
  const execs = await time(async (i) => {
    const exited = exitOf(`true-${i}`);
    await client.exec({ execId: `true-${i}`, argv: ["/bin/true"], env: { PATH: "/usr/bin:/bin" } });
    await exited;
  });

  let bytes = 0;
  const onOutput = (e: { data: string }): void => {
    bytes += Buffer.byteLength(e.data, "base64");
  };
  client.on("output", onOutput);
  const exited = exitOf("flood");
  const start = performance.now();
  await client.exec({ execId: "flood", argv: ["/bin/sh", "-c", `head -c ${mib * 1024 * 1024} /dev/zero`], env: {} });
  await exited;
  const seconds = (performance.now() - start) / 1000;
  client.off("output", onOutput);
  await client.shutdown("poweroff");

  const rows = [
    ["measure", "n", "median ms", "p95 ms", "max ms"],
    ["hello round trip", String(rounds), pct(hello, 50), pct(hello, 95), pct(hello, 100)],
    ["exec.status round trip", String(rounds), pct(status, 50), pct(status, 95), pct(status, 100)],
    ["exec /bin/true to exit event", String(rounds), pct(execs, 50), pct(execs, 95), pct(execs, 100)],
  ];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  for (const r of rows) console.log(r.map((v, c) => v.padEnd(widths[c]!)).join("  "));
  console.log(`stdout through output events: ${(bytes / 1024 / 1024).toFixed(0)} MiB in ${seconds.toFixed(2)} s = ${(bytes / 1024 / 1024 / seconds).toFixed(1)} MiB/s`);
} finally {
  if (agent.exitCode === null) agent.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}
