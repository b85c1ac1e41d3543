/**
 * One VM's directory on the node, `<stateDir>/vms/<id>`, and every path inside it: the only place
 * that joins them. The id is checked here, once, so no path built from it can leave the directory.
 * The VMM driver keeps its own files under `vmm()` (sockets, console, the VM record).
 */
import { join } from "node:path";
import { terminalError } from "../../shared/index.ts";

/** Kubernetes uids, `imp run`'s ids: lowercase letters, digits and hyphens. */
const VM_ID = /^[a-z0-9][a-z0-9-]{0,63}$/;

export class VmDir {
  readonly id: string;
  readonly root: string;

  private constructor(vmsDir: string, id: string) {
    this.id = id;
    this.root = join(vmsDir, id);
  }

  /** The directory of VM `id` under `<stateDir>/vms`. Throws a terminal `VmIdInvalid` for an id that is not a plain name. */
  static of(stateDir: string, id: string): VmDir {
    if (!VM_ID.test(id)) throw terminalError("VmIdInvalid", `Cannot use ${JSON.stringify(id.slice(0, 80))} as a VM id: need 1–64 lowercase letters, digits or hyphens`);
    return new VmDir(VmDir.vmsDir(stateDir), id);
  }

  /** Where every VM directory of a node lives (the sweep lists it). */
  static vmsDir(stateDir: string): string {
    return join(stateDir, "vms");
  }

  /** The VMM driver's directory: sockets, console, VM record, supervisor files. */
  vmm(): string {
    return join(this.root, "vmm");
  }

  /** This boot's exit record key (0600): what a restarted agent verifies exit records with. */
  exitKey(): string {
    return join(this.root, "exit-record.key");
  }
}
