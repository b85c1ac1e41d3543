// Started by control-plane.test.ts: starts a control plane in the directory given as argv[2]
// (the test removes it), prints its pids, then waits to be killed.
import { startControlPlane } from "../../../src/devcluster/index.ts";

const dir = process.argv[2];
if (dir === undefined) throw new Error("usage: owner-process.fixture.ts DIR");
const plane = await startControlPlane({ controllerManager: true, dir });
process.stdout.write(`PIDS ${Object.values(plane.state().pids).join(",")}\n`);
setInterval(() => undefined, 1_000);
