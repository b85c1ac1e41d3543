/**
 * A real Prometheus (scripts/setup.d/66-prometheus.sh builds it) for tests: started with the
 * configuration a test gives, optionally inside a network namespace (where a node's Pods and
 * Services are reachable), and asked through its HTTP API.
 */
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { stringify } from "yaml";
import { logTail } from "../../src/devcluster/log-tail.ts";
import { ManagedProcess } from "../../src/devcluster/managed-process.ts";
import { waitFor } from "../../src/shared/index.ts";

const repoRoot = resolve(import.meta.dirname, "../..");
const cacheDir = process.env.IMP_CACHE ?? join(repoRoot, ".cache");
export const PROMETHEUS_BIN = join(cacheDir, "bin", "prometheus");

/** Why no Prometheus can run here, or undefined. */
export function prometheusUnavailable(): string | undefined {
  return existsSync(PROMETHEUS_BIN) ? undefined : `no Prometheus at ${PROMETHEUS_BIN} (scripts/setup.d/66-prometheus.sh builds it)`;
}

export interface PrometheusOptions {
  /** Its configuration and data live here. */
  readonly dir: string;
  /** prometheus.yml as an object. */
  readonly config: object;
  /** host:port to listen on (inside `netns` when given). */
  readonly listen: string;
  /** A network namespace under /run/netns to run in. */
  readonly netns?: string;
}

export interface Sample {
  readonly metric: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface RuleState {
  readonly name: string;
  readonly health: string;
  readonly lastError?: string;
  readonly lastEvaluation: string;
  readonly state?: string;
}

export class RunningPrometheus {
  readonly url: string;
  readonly #process: ManagedProcess;
  readonly #log: string;

  private constructor(url: string, process: ManagedProcess, log: string) {
    this.url = url;
    this.#process = process;
    this.#log = log;
  }

  static async start(o: PrometheusOptions): Promise<RunningPrometheus> {
    await mkdir(join(o.dir, "data"), { recursive: true });
    const configFile = join(o.dir, "prometheus.yml");
    await writeFile(configFile, stringify(o.config));
    const args = [`--config.file=${configFile}`, `--storage.tsdb.path=${join(o.dir, "data")}`, `--web.listen-address=${o.listen}`, "--log.level=info"];
    const log = join(o.dir, "prometheus.log");
    const process = o.netns === undefined
      ? new ManagedProcess({ name: "prometheus", command: PROMETHEUS_BIN, args, logFile: log })
      : new ManagedProcess({ name: "prometheus", command: "nsenter", args: [`--net=/run/netns/${o.netns}`, "--", PROMETHEUS_BIN, ...args], logFile: log });
    const running = new RunningPrometheus(`http://${o.listen}`, process, log);
    try {
      await waitFor("Prometheus ready", async () => {
        if (!process.running) throw new Error(`prometheus exited: ${await logTail(log, 30)}`);
        return (await fetch(`${running.url}/-/ready`).then((r) => r.ok, () => false)) ? true : undefined;
      }, { timeoutMs: 60_000, intervalMs: 250 });
      return running;
    } catch (err) {
      await running.stop();
      throw err;
    }
  }

  /** An instant query's vector. */
  async query(expr: string): Promise<Sample[]> {
    const body = await this.#get<{ resultType: string; result: Array<{ metric: Record<string, string>; value: [number, string] }> }>(`/api/v1/query?query=${encodeURIComponent(expr)}`);
    if (body.resultType !== "vector") throw new Error(`Cannot read ${expr}: Prometheus answered a ${body.resultType}, not a vector`);
    return body.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
  }

  /** Every rule of every loaded group, as last evaluated. */
  async rules(): Promise<RuleState[]> {
    const body = await this.#get<{ groups: Array<{ rules: RuleState[] }> }>("/api/v1/rules");
    return body.groups.flatMap((g) => g.rules);
  }

  /** The end of its own log, for failure messages. */
  async logTail(lines = 30): Promise<string> {
    return logTail(this.#log, lines);
  }

  async stop(): Promise<void> {
    await this.#process.stop();
  }

  async #get<T>(path: string): Promise<T> {
    const res = await fetch(`${this.url}${path}`, { signal: AbortSignal.timeout(10_000) });
    const json = (await res.json()) as { status: string; data: T; error?: string };
    if (json.status !== "success") throw new Error(`Prometheus ${path}: ${json.error ?? res.status}`);
    return json.data;
  }
}
