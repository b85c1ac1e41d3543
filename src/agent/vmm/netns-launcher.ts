/**
 * Starts every VM process inside a named network namespace (`ip netns exec`), where the node
 * network keeps its bridge and taps. `ip netns exec` execs the program in place, so the pid and the
 * process identity the supervisor and the sweep check stay the program's own.
 *
 * Used when the agent's VM network lives in a namespace of its own (`createNodeAgent({ netns })`):
 * tests that simulate several nodes on one machine, or a node that keeps VM traffic out of the
 * host's namespace.
 */
import type { LaunchRequest, ProcessLauncher, VmmProcess } from "./types.ts";

export class NetnsLauncher implements ProcessLauncher {
  readonly #inner: ProcessLauncher;
  readonly #netns: string;

  constructor(inner: ProcessLauncher, netns: string) {
    this.#inner = inner;
    this.#netns = netns;
  }

  launch(request: LaunchRequest): Promise<VmmProcess> {
    return this.#inner.launch({ ...request, binary: "ip", args: ["netns", "exec", this.#netns, request.binary, ...request.args] });
  }
}
