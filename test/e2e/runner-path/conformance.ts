/**
 * The hosted-runner conformance job: what workflows assume of a GitHub-hosted Ubuntu runner, each
 * checked inside the job VM and reported by name on its own line (`conformance <name> ok|FAIL <detail>`),
 * so that a failure names the assumption, not just "the job failed". The same bash script runs on
 * both forges (test/e2e/hosted-runner.test.ts): as a step of the GitHub test runner and as a step of
 * the real gitea-runner, on the Docker runner image as the `runner` user.
 */

/** Each check's name and what it stands for (docs/workloads.md lists them). */
export const CONFORMANCE_CHECKS = {
  "dev-fd": "/dev/fd exists; bash process substitution (`diff <(a) <(b)`) works",
  "std-links": "/dev/stdin, /dev/stdout and /dev/stderr open by name as the job's user",
  "dev-shm": "/dev/shm is writable",
  "tmp": "/tmp is sticky and writable",
  "nofile": "ulimit -n (soft and hard) is at least 65536",
  "locale": "a UTF-8 locale: LANG names UTF-8 and a two-byte character counts as one",
  "hostname": "the VM's hostname resolves (`hostname -f`, `getent hosts`, /etc/hosts)",
  "loopback": "TCP over IPv4 and IPv6 loopback",
  "sudo": "`sudo -n` without a password gives uid 0",
  "docker-group": "the job's user is in the docker group and reaches the job's own dockerd",
  "home-user-path": "HOME=/home/runner, USER=runner, and PATH holds the usual system directories",
  "runner-vars": "CI=true, GITHUB_ACTIONS=true, RUNNER_OS names Linux (in any case, as expressions compare), RUNNER_TEMP and GITHUB_WORKSPACE writable",
  "runner-os": "RUNNER_OS is exactly `Linux`, for shell comparisons (`[ \"$RUNNER_OS\" = Linux ]`)",
} as const;

/**
 * Checks a forge's own runner program is known to fail, and why; the test expects exactly these to
 * fail, so a fixed runner (or a new gap) is noticed. Imp does not patch the runner.
 */
export const KNOWN_RUNNER_GAPS: Readonly<Record<"github" | "gitea", Partial<Record<ConformanceCheck, string>>>> = {
  github: {},
  gitea: {
    "runner-os": "gitea-runner v1.0.8 in host mode sets RUNNER_OS from Go's runtime.GOOS, `linux` (act/container/host_environment.go maps only darwin to macOS); in its Docker mode it sets `Linux`",
  },
};

export type ConformanceCheck = keyof typeof CONFORMANCE_CHECKS;

/**
 * The script (bash). It checks everything, prints one line per check, leaves a background process
 * running (a hosted runner ends it with the job; here the VM ends with it) and exits non-zero if any
 * check failed.
 */
export const CONFORMANCE_SCRIPT = String.raw`# Every check runs, whatever the one before did (Gitea runs bash steps with -e -o pipefail).
set +e +o pipefail -u
failed=0
report() { # name status detail
  if [ "$2" = 0 ]; then echo "conformance $1 ok $3"; else echo "conformance $1 FAIL $3"; failed=$((failed + 1)); fi
}
check() { # name function: runs it, its output (one line) as the detail
  local out rc
  out=$("$2" 2>&1); rc=$?
  report "$1" "$rc" "$(printf '%s' "$out" | tr '\n' ' ' | cut -c1-300)"
}
dev_fd() { [ -e /dev/fd/0 ] && [ "$(cat <(echo substituted))" = substituted ] && diff <(printf 'a\n') <(printf 'a\n') && echo "process substitution works"; }
dev_shm() { local f=/dev/shm/imp-conformance.$$; echo x >"$f" && rm "$f" && echo "$(stat -c %A /dev/shm)"; }
tmp() { [ -k /tmp ] && local f && f=$(mktemp) && rm "$f" && echo "$(stat -c %A /tmp)"; }
nofile() { echo "soft $(ulimit -Sn) hard $(ulimit -Hn)"; [ "$(ulimit -Sn)" -ge 65536 ] && [ "$(ulimit -Hn)" -ge 65536 ]; }
locale_utf8() { echo "LANG=${"${LANG:-}"} chars=$(printf '\xc3\xa9' | wc -m)"; case "${"${LC_ALL:-${LANG:-}}"}" in *UTF-8* | *utf8*) ;; *) return 1 ;; esac; [ "$(printf '\xc3\xa9' | wc -m)" = 1 ]; }
host_name() { local h; h=$(hostname) && echo "hostname $h -f $(hostname -f) hosts $(getent hosts "$h" | tr -s ' ')" && grep -qw "$h" /etc/hosts; }
loopback() { python3 -c '
import socket
for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    server = socket.socket(family); server.bind((addr, 0)); server.listen(1)
    client = socket.create_connection(server.getsockname()[:2], timeout=5); peer, _ = server.accept()
    client.sendall(b"ping"); assert peer.recv(4) == b"ping"; print(addr, "ok", end=" ")
'; }
sudo_n() { echo "sudo uid $(sudo -n id -u)"; [ "$(sudo -n id -u)" = 0 ]; }
docker_group() { echo "groups $(id -Gn)"; id -Gn | tr ' ' '\n' | grep -qx docker && echo "dockerd $(docker info --format '{{.ServerVersion}}')" && docker info >/dev/null; }
home_user_path() {
  echo "HOME=$HOME USER=${"${USER:-}"} id=$(id -un) PATH=$PATH"
  [ "$HOME" = /home/runner ] && [ "${"${USER:-}"}" = runner ] && [ "$(id -un)" = runner ] || return 1
  for d in /usr/local/bin /usr/bin /bin /usr/local/sbin /usr/sbin /sbin; do case ":$PATH:" in *":$d:"*) ;; *) echo "missing $d"; return 1 ;; esac; done
}
runner_vars() {
  echo "CI=${"${CI:-}"} GITHUB_ACTIONS=${"${GITHUB_ACTIONS:-}"} RUNNER_OS=${"${RUNNER_OS:-}"} RUNNER_TEMP=${"${RUNNER_TEMP:-}"} GITHUB_WORKSPACE=${"${GITHUB_WORKSPACE:-}"}"
  [ "${"${CI:-}"}" = true ] && [ "${"${GITHUB_ACTIONS:-}"}" = true ] && [ "$(printf '%s' "${"${RUNNER_OS:-}"}" | tr A-Z a-z)" = linux ] || return 1
  touch "${"${RUNNER_TEMP:-/nonexistent}"}/imp-conformance" && rm "$RUNNER_TEMP/imp-conformance" || return 1
  touch "${"${GITHUB_WORKSPACE:-/nonexistent}"}/imp-conformance" && rm "$GITHUB_WORKSPACE/imp-conformance"
}
check dev-fd dev_fd
# Opened by name in this shell, whose output is the runner's own pipe (a check inside $(…) would open
# the capture's pipe instead).
if (: >/dev/stdout) && (: >/dev/stderr) && (: </dev/stdin); then report std-links 0 "opened by name as $(id -un)"; else report std-links 1 "as $(id -un): $(ls -lL /dev/stdout /dev/stderr 2>&1 | tr '\n' ' ')"; fi
check dev-shm dev_shm
check tmp tmp
check nofile nofile
check locale locale_utf8
check hostname host_name
check loopback loopback
check sudo sudo_n
check docker-group docker_group
check home-user-path home_user_path
check runner-vars runner_vars
runner_os() { echo "RUNNER_OS=${"${RUNNER_OS:-}"}"; [ "${"${RUNNER_OS:-}"}" = Linux ]; }
check runner-os runner_os
# Left running on purpose: the job must still end, and nothing of it may outlive the VM.
nohup sleep 3600 >/dev/null 2>&1 &
echo "conformance background pid $! left running"
echo "conformance done: $failed failed"
exit "$failed"
`;

/** A GitHub job step (run by `sh -e`): writes the script and runs it with bash. */
export function conformanceStepForSh(): string {
  return `cat > conformance.sh <<'IMP_CONFORMANCE_EOF'\n${CONFORMANCE_SCRIPT}\nIMP_CONFORMANCE_EOF\nbash conformance.sh`;
}

/** A Gitea workflow running the script as a `shell: bash` step on runners labelled `label`. */
export function conformanceWorkflow(label: string): string {
  const body = CONFORMANCE_SCRIPT.split("\n").map((l) => `          ${l}`).join("\n");
  return `name: conformance\non: [push]\njobs:\n  conformance:\n    runs-on: ${label}\n    steps:\n      - name: hosted-runner conformance\n        shell: bash\n        run: |\n${body}\n`;
}

export interface ConformanceResult {
  readonly ok: boolean;
  readonly detail: string;
}

/** The checks' results as the job's log shows them (timestamps and prefixes before "conformance" are ignored). */
export function parseConformance(log: string): Map<string, ConformanceResult> {
  const results = new Map<string, ConformanceResult>();
  for (const m of log.matchAll(/conformance (\S+) (ok|FAIL) ?(.*)$/gm)) results.set(m[1] ?? "", { ok: m[2] === "ok", detail: m[3] ?? "" });
  return results;
}
