// Started by control-plane.test.ts: starts a control plane, prints its pids, then waits to be killed.
import { startControlPlane } from "../../../src/devcluster/index.ts";

const plane = await startControlPlane({ controllerManager: true });
process.stdout.write(`PIDS ${Object.values(plane.state().pids).join(",")}\n`);
setInterval(() => undefined, 1_000);
