/**
 * A {@link SetupStore} in memory, with the API store's rules: a setup is sent at most once
 * (Minted → Sent, never again), an exec id once recorded is never replaced, a deleted setup stays
 * deleted. For tests of the runtime and of `imp run`-like callers without an API server.
 */
import { terminalError } from "../../shared/index.ts";
import type { SetupStore, VmRef } from "./ports.ts";

export interface StoredSetup {
  sealed?: string;
  state: "Minted" | "Sent" | "Deleted" | "None";
  execId?: string;
}

export class MemorySetupStore implements SetupStore {
  /** By VM uid. */
  readonly setups = new Map<string, StoredSetup>();
  /** `name:execId` of every recorded send, in order. */
  readonly sent: string[] = [];

  /** Stores a sealed setup for `vm`, as the operator's mint would. */
  mint(vm: VmRef, sealed: string): void {
    this.setups.set(vm.uid, { sealed, state: "Minted" });
  }

  readSealed(vm: VmRef): Promise<string | undefined> {
    const setup = this.setups.get(vm.uid);
    return Promise.resolve(setup?.state === "Minted" ? setup.sealed : undefined);
  }

  recordSent(vm: VmRef, execId: string, _signal?: AbortSignal): Promise<void> {
    const setup = this.setups.get(vm.uid) ?? { state: "None" as const };
    if (setup.execId !== undefined && setup.execId !== execId) return Promise.reject(terminalError("ExecIdMismatch", `Cannot send the workload: the VM's execId is ${setup.execId}, not ${execId}`));
    if (setup.state !== "None" && setup.state !== "Minted") return Promise.reject(terminalError("SetupAlreadySent", `Cannot send the setup: its state is ${setup.state}; a one-time setup is never sent twice`));
    this.setups.set(vm.uid, { ...setup, execId, state: setup.state === "Minted" ? "Sent" : "None" });
    this.sent.push(`${vm.name}:${execId}`);
    return Promise.resolve();
  }

  delete(vm: VmRef): Promise<void> {
    const setup = this.setups.get(vm.uid);
    if (setup === undefined || setup.state === "None") return Promise.resolve();
    const { sealed: _gone, ...rest } = setup;
    this.setups.set(vm.uid, { ...rest, state: "Deleted" });
    return Promise.resolve();
  }
}
