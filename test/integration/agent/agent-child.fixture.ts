// A node agent in its own process, so a test can SIGKILL it like a crashed agent. Configured by env:
// IMP_TEST_KUBECONFIG (a file), IMP_TEST_NODE, IMP_TEST_STATE_DIR. Its log goes to stdout.
import { KubeConfig } from "@kubernetes/client-node";
import { startTestAgent } from "../../harness/node-agent.ts";

const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(process.env["IMP_TEST_KUBECONFIG"] ?? "");
const agent = await startTestAgent({ kubeConfig, nodeName: process.env["IMP_TEST_NODE"] ?? "", stateDir: process.env["IMP_TEST_STATE_DIR"] ?? "", supervised: true });
setInterval(() => {
  const text = agent.logs();
  if (text.length > 0) process.stdout.write(text.slice(printed));
  printed = text.length;
}, 200);
let printed = 0;
process.stdout.write("agent-started\n");
