/** Where a QEMU VM keeps its files. The only place that builds these paths. */
import { join } from "node:path";
import { terminalError } from "../../../shared/index.ts";

export class QemuVmDir {
  readonly root: string;
  constructor(root: string) {
    // sun_path is 108 bytes including the NUL; the longest name below is 15 bytes.
    if (Buffer.byteLength(join(root, "vhost-user.sock")) > 107) {
      throw terminalError("VmDirTooLong", `Cannot use VM directory ${root}: Unix socket paths inside it would exceed 107 bytes`);
    }
    this.root = root;
  }
  serialLog(): string { return join(this.root, "serial.log"); }
  /** QEMU's stdout and stderr. */
  qemuLog(): string { return join(this.root, "qemu.log"); }
  backendLog(): string { return join(this.root, "vhost-device-vsock.log"); }
  /** vhost-user control socket between QEMU and vhost-device-vsock. */
  vhostUserSocket(): string { return join(this.root, "vhost-user.sock"); }
  /** Hybrid-vsock Unix socket the host dials (`CONNECT <port>`), as Firecracker's `uds_path`. */
  vsockUds(): string { return join(this.root, "vsock.sock"); }
  /** virtio-serial agent port, QEMU listening. */
  agentSocket(): string { return join(this.root, "agent.sock"); }
  /** QEMU's monitor (QMP), for VMs saved to or restored from a memory snapshot. */
  qmpSocket(): string { return join(this.root, "qmp.sock"); }
  sockets(): string[] { return [this.vhostUserSocket(), this.vsockUds(), this.agentSocket(), this.qmpSocket()]; }
}
