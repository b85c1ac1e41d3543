/**
 * Saving a paused VM's device state and loading it into a new QEMU, over QMP. The guest's RAM is not
 * in the saved stream: it lives in a file (`memory-backend-file`), shared (written through) by the
 * template and mapped privately — copy-on-write — by each restored VM, and QEMU's `x-ignore-shared`
 * migration capability leaves such RAM out of the stream (QEMU's VM templating, as Kata Containers
 * uses it). So the state file is tens of KiB and a restore costs the same whatever the VM touched.
 * Measured here, with QEMU 7.2 (docs/snapshots.md). QEMU 7.2 has no `file:` migration URI (8.2+), so
 * the stream goes through `exec:cat`, which QEMU runs with `/bin/sh -c`: the path is checked to hold
 * no character the shell would read.
 */
import { stat } from "node:fs/promises";
import { retryableError, terminalError, type Clock } from "../../../shared/index.ts";
import type { QmpClient } from "./qmp.ts";

const SHELL_SAFE_PATH = /^\/[A-Za-z0-9._/-]+$/;
const CAPABILITIES = [{ capability: "x-ignore-shared", state: true }];
/** A single QMP command (not the migration it starts) answers at once; a monitor this slow is stuck. */
const COMMAND_TIMEOUT_MS = 5_000;

export interface MemorySnapshotTimings {
  /** From the save's (or load's) start to QEMU reporting the migration completed. */
  readonly ms: number;
  /** Size of the device-state stream. */
  readonly stateBytes: number;
}

interface MigrationStatus {
  readonly status?: string;
  readonly "error-desc"?: string;
}

function checkPath(path: string): string {
  if (!SHELL_SAFE_PATH.test(path)) {
    throw terminalError("VmSpecInvalid", `Cannot use ${JSON.stringify(path)} as a snapshot state file: QEMU 7.2 hands it to /bin/sh, so only an absolute path of A-Z a-z 0-9 . _ / - is accepted`);
  }
  return path;
}

/**
 * Pauses the VM and writes its device state to `statePath`. The VM stays paused: its RAM file now
 * matches the state, and the caller must end QEMU before anything resumes it (a resumed template
 * would write through to the file the restored VMs map). Rejects with a retryable
 * `SnapshotSaveFailed` when QEMU reports failure or `timeoutMs` passes.
 */
export async function saveMemorySnapshot(qmp: QmpClient, statePath: string, options: { readonly timeoutMs: number; readonly clock: Clock; readonly signal?: AbortSignal }): Promise<MemorySnapshotTimings> {
  const path = checkPath(statePath);
  const started = options.clock.now();
  await qmp.execute("stop", {}, { timeoutMs: COMMAND_TIMEOUT_MS });
  await qmp.execute("migrate-set-capabilities", { capabilities: CAPABILITIES }, { timeoutMs: COMMAND_TIMEOUT_MS });
  await qmp.execute("migrate", { uri: `exec:cat > ${path}` }, { timeoutMs: COMMAND_TIMEOUT_MS });
  await waitForMigration(qmp, "save", options);
  const { size } = await stat(path);
  return { ms: options.clock.now() - started, stateBytes: size };
}

/**
 * Loads `statePath` into a QEMU started with `-incoming defer` and the template's command line,
 * then resumes the guest. Rejects with a retryable `SnapshotLoadFailed` when QEMU reports failure
 * (a truncated or foreign stream) or `timeoutMs` passes; the caller stops that QEMU.
 */
export async function loadMemorySnapshot(qmp: QmpClient, statePath: string, options: { readonly timeoutMs: number; readonly clock: Clock; readonly signal?: AbortSignal }): Promise<MemorySnapshotTimings> {
  const path = checkPath(statePath);
  const { size } = await stat(path);
  const started = options.clock.now();
  await qmp.execute("migrate-set-capabilities", { capabilities: CAPABILITIES }, { timeoutMs: COMMAND_TIMEOUT_MS });
  await qmp.execute("migrate-incoming", { uri: `exec:cat ${path}` }, { timeoutMs: COMMAND_TIMEOUT_MS });
  await waitForMigration(qmp, "load", options);
  await qmp.execute("cont", {}, { timeoutMs: COMMAND_TIMEOUT_MS });
  return { ms: options.clock.now() - started, stateBytes: size };
}

async function waitForMigration(qmp: QmpClient, what: "save" | "load", options: { readonly timeoutMs: number; readonly clock: Clock; readonly signal?: AbortSignal }): Promise<void> {
  const code = what === "save" ? "SnapshotSaveFailed" : "SnapshotLoadFailed";
  const deadline = options.clock.now() + options.timeoutMs;
  for (;;) {
    options.signal?.throwIfAborted();
    const status = await qmp.execute<MigrationStatus>("query-migrate", {}, { timeoutMs: COMMAND_TIMEOUT_MS });
    if (status.status === "completed") return;
    if (status.status === "failed" || status.status === "cancelled") {
      throw retryableError(code, `Cannot ${what} the VM's snapshot: QEMU says the migration ${status.status}${status["error-desc"] === undefined ? "" : `: ${status["error-desc"]}`}`);
    }
    if (options.clock.now() > deadline) {
      throw retryableError(code, `Cannot ${what} the VM's snapshot: not completed within ${options.timeoutMs} ms (QEMU says ${status.status ?? "nothing"})`);
    }
    await options.clock.sleep(10, options.signal);
  }
}
