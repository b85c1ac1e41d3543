/**
 * Stands in for a node agent in the supervisor tests: launches one process under the supervisor, prints
 * its supervision directory and identity as one JSON line, then idles until it is killed.
 * Usage: node agent-child.ts <supervisor-binary> <vm-dir> <vm-id> <cgroup-parent|-> <binary> [args...]
 */
import { join } from "node:path";
import { SupervisorLauncher } from "../../../src/agent/supervisor/index.ts";

const [supervisorBinary, vmDir, vmId, cgroupParent, binary, ...args] = process.argv.slice(2);
if (supervisorBinary === undefined || vmDir === undefined || vmId === undefined || cgroupParent === undefined || binary === undefined) {
  throw new Error("usage: agent-child.ts <supervisor-binary> <vm-dir> <vm-id> <cgroup-parent|-> <binary> [args...]");
}
const launcher = new SupervisorLauncher({
  supervisorBinary, vmDir, vmId,
  ...(cgroupParent === "-" ? {} : { cgroup: { parent: cgroupParent } }),
  memoryLimitBytes: () => 256 * 1024 * 1024,
});
const proc = await launcher.launch({ name: "vmm", binary, args, stdoutPath: join(vmDir, "vmm.out"), stderrPath: join(vmDir, "vmm.err") });
process.stdout.write(`${JSON.stringify({ dir: proc.dir, identity: proc.identity })}\n`);
setInterval(() => {}, 60_000);
