import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { terminalError, type ImpError } from "../../shared/index.ts";
import { SupervisorConnection } from "./connection.ts";
import { bootId, liveness } from "./proc.ts";
import { readExitRecord, readIdentity, sameProcess, SUPERVISOR_FILES, type SupervisorIdentity } from "./records.ts";
import { asSupervisedExit, SupervisedProcess } from "./supervised-process.ts";

export interface AdoptSupervisedOptions {
  /** Bound on connecting to the supervisor; default 5 s. */
  readonly timeoutMs?: number;
}

const mismatch = (identity: SupervisorIdentity, dir: string, state: string): ImpError =>
  terminalError("SupervisorIdentityMismatch", `Cannot adopt supervised process ${identity.name} in ${dir}: ${state}`, {
    context: { dir, pid: identity.supervisor.pid, startTime: identity.supervisor.startTime },
  });

/**
 * Reattaches to a process started by {@link SupervisorLauncher} before this agent restarted. The
 * supervisor must still be the one recorded in supervisor.json: same boot, same pid *and* same start
 * time, and its socket must greet with the same identities; a pid alone is never trusted. A process
 * that exited while no agent was connected is returned as exited, with the status from exit.json.
 */
export async function adoptSupervised(dir: string, options: AdoptSupervisedOptions = {}): Promise<SupervisedProcess> {
  const identity = await readIdentity(dir).catch((err: unknown) => {
    throw terminalError("SupervisorIdentityInvalid", `Cannot adopt supervised process in ${dir}: ${String(err)}`, { cause: err });
  });
  if (identity === undefined) {
    throw terminalError("SupervisorNotFound", `Cannot adopt supervised process in ${dir}: no ${SUPERVISOR_FILES.identity}`);
  }
  if (identity.bootId !== (await bootId())) throw mismatch(identity, dir, `its identity is from boot ${identity.bootId}, not this one`);
  const recordedExit = async (): Promise<SupervisedProcess | undefined> => {
    const record = await readExitRecord(dir);
    if (record === undefined) return undefined;
    if (!sameProcess(record.process, identity.process)) throw mismatch(identity, dir, `exit.json is for pid ${record.process.pid}, not ${identity.process.pid}`);
    return new SupervisedProcess(dir, identity, undefined, {}, asSupervisedExit(record));
  };
  const exited = await recordedExit();
  if (exited !== undefined) return exited;

  const state = await liveness(identity.supervisor);
  if (state !== "alive") {
    const late = await recordedExit(); // it may have recorded and exited just now
    if (late !== undefined) return late;
    throw state === "reused"
      ? mismatch(identity, dir, `pid ${identity.supervisor.pid} now belongs to another process (start time differs from ${identity.supervisor.startTime}); the supervisor is gone`)
      : terminalError("SupervisorLost", `Cannot adopt supervised process ${identity.name} in ${dir}: supervisor pid ${identity.supervisor.pid} is gone and recorded no exit`, { context: { dir } });
  }
  let connection: SupervisorConnection;
  try {
    connection = await SupervisorConnection.connect(join(dir, SUPERVISOR_FILES.socket), options.timeoutMs ?? 5_000);
  } catch (err) {
    const late = await recordedExit();
    if (late !== undefined) return late;
    throw err;
  }
  const hello = await connection.hello;
  if (!sameProcess(hello.supervisor, identity.supervisor) || !sameProcess(hello.process, identity.process)) {
    connection.close();
    throw mismatch(identity, dir, `the socket is served by supervisor ${hello.supervisor.pid}/${hello.supervisor.startTime} of process ${hello.process.pid}/${hello.process.startTime}, not the recorded ones`);
  }
  // A supervisor that has reaped its process says so in its hello, though it may not have written
  // exit.json or closed its socket yet (it kills the cgroup's leftovers and syncs the record first):
  // that process is gone, whatever a later status race would say.
  if (hello.state === "exited" && hello.exit !== undefined) {
    connection.close();
    return new SupervisedProcess(dir, identity, undefined, {}, asSupervisedExit(hello.exit));
  }
  return new SupervisedProcess(dir, identity, connection);
}

export interface AdoptAllSupervisedResult {
  readonly adopted: readonly SupervisedProcess[];
  readonly refused: readonly { readonly dir: string; readonly error: unknown }[];
}

/** Adopts every supervised process of one VM (`<vmDir>/supervised/*`). */
export async function adoptAllSupervised(vmDir: string, options: AdoptSupervisedOptions = {}): Promise<AdoptAllSupervisedResult> {
  let names: string[];
  try {
    names = await readdir(join(vmDir, "supervised"));
  } catch {
    return { adopted: [], refused: [] };
  }
  const adopted: SupervisedProcess[] = [];
  const refused: { dir: string; error: unknown }[] = [];
  for (const name of names.sort()) {
    const dir = join(vmDir, "supervised", name);
    try {
      adopted.push(await adoptSupervised(dir, options));
    } catch (error) {
      refused.push({ dir, error });
    }
  }
  return { adopted, refused };
}
