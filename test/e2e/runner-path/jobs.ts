/**
 * The shell steps of the jobs the end-to-end scenario queues, and the parsers of what they print.
 * They run inside the VMs under busybox `sh -e`, as a workflow's `run:` steps do.
 */
import type { JobStep } from "../../github/server.ts";

/** A harmless job: says where it runs. */
export function helloSteps(): JobStep[] {
  return [
    { name: "greet", run: 'echo "hello from $(hostname), kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) vCPU"' },
    { name: "work", run: "echo 'building...'; i=0; while [ $i -lt 3 ]; do i=$((i+1)); echo \"step $i\"; done; echo done" },
  ];
}

/**
 * One of `parties` jobs that run at the same time and look for each other. Each leaves a marker file,
 * serves its name on port 8080, meets the others at a barrier on the GitHub test server (which its
 * VM reaches, as a runner reaches GitHub) where each tells its address, then looks for the others'
 * markers and connects to the others' addresses, and meets them once more before it ends so that
 * every VM is still up while the others probe it.
 */
export function isolationSteps(me: string, parties: number, barrierUrl: string): JobStep[] {
  const script = `
ME=${me}
IP=$(ip -o -4 addr show dev eth0 | sed -n 's/.* inet \\([0-9.]*\\)\\/.*/\\1/p')
echo "marker of $ME" > /tmp/imp-marker-$ME
echo "marker of $ME" > imp-marker-$ME
# Detached from the step's output, or the runner would wait for the listener to close it. The
# image is busybox alone (applets run from the shell, but -e needs a real program).
nc -ll -p 8080 -e /bin/busybox echo "$ME" </dev/null >/dev/null 2>&1 &
LISTENER=$!
barrier() {
  n=0
  until out=$(wget -q -O - --header 'content-type: application/json' --post-data "{\\"parties\\":${parties},\\"party\\":\\"$ME\\",\\"value\\":\\"$IP\\"}" "${barrierUrl}-$1" 2>/dev/null) && [ -n "$out" ]; do
    n=$((n+1)); [ $n -lt 40 ] || { echo "barrier $1 never complete"; exit 9; }; sleep 1
  done
  echo "$out"
}
peers=$(barrier ready)
echo "me $ME at $IP"
echo "peers $peers"
echo "foreign files:$(ls /tmp . / | grep '^imp-marker-' | grep -v "^imp-marker-$ME\\$" | tr '\\n' ' ')."
for ip in $(echo "$peers" | grep -o '[0-9]*\\.[0-9]*\\.[0-9]*\\.[0-9]*' | sort -u); do
  [ "$ip" != "$IP" ] || continue
  if ans=$(nc -w 3 "$ip" 8080 </dev/null 2>/dev/null) && [ -n "$ans" ]; then echo "probe $ip reached $ans"; else echo "probe $ip refused"; fi
done
echo "self $(nc -w 3 "$IP" 8080 </dev/null 2>/dev/null)"
barrier done >/dev/null
kill $LISTENER
`;
  return [{ name: "isolation", run: script }];
}

export interface IsolationReport {
  readonly me: string;
  readonly ip: string;
  readonly foreignFiles: string;
  readonly probes: ReadonlyArray<{ ip: string; reached: string | undefined }>;
  readonly self: string;
}

/** Parses what isolationSteps printed; undefined parts stay empty so an assertion shows the log. */
export function parseIsolation(log: string): IsolationReport {
  const me = /^me (\S+) at (\S+)$/m.exec(log);
  const probes = [...log.matchAll(/^probe (\S+) (?:reached (\S+)|refused)$/gm)].map((m) => ({ ip: m[1] ?? "", reached: m[2] }));
  return {
    me: me?.[1] ?? "",
    ip: me?.[2] ?? "",
    foreignFiles: /^foreign files:(.*)\.$/m.exec(log)?.[1]?.trim() ?? "(missing)",
    probes,
    self: /^self (.*)$/m.exec(log)?.[1]?.trim() ?? "",
  };
}
