#!/bin/bash
# The Gitea runner VM's workload (the pool's runnerCommand): runs gitea-runner for exactly one job.
#
# The one-time setup — the runner's `.runner` file, minted by Imp's operator with Gitea's Register
# call and sealed to this node — arrives on stdin (runnerSetupDelivery: Stdin). It is handed to the
# runner through a FIFO: the runner reads it once into its memory, and it never exists on any
# filesystem of the VM, not even on tmpfs. `daemon --once` with an ephemeral registration takes
# one job and exits 0 whatever the job's result; Gitea deletes the runner when the job ends.
#
# Run as root (the Gitea runner image) or as an unprivileged user whose session has a runtime
# directory (the Docker runner image's entry point runs it as `runner`): the FIFO lives there, and
# jobs work under the user's home as on a hosted runner.
set -euo pipefail
umask 077
if [[ $(id -u) -eq 0 ]]; then
  export HOME=/root
  state_parent=/run work=/var/lib/gitea-runner/work
else
  state_parent="${XDG_RUNTIME_DIR:?an unprivileged runner needs a runtime directory}" work="$HOME/work"
fi
state="$(mktemp -d "$state_parent/gitea-runner.XXXXXX")"
setup="$(cat)"
exec 0</dev/null
mkfifo "$state/.runner"
cat >"$state/config.yaml" <<YAML
log: {level: info}
runner:
  file: $state/.runner
  capacity: 1
  fetch_interval: 1s
  fetch_interval_max: 2s
  shutdown_timeout: 0s
cache: {enabled: false}
host: {workdir_parent: $work}
YAML
# The writer blocks until the runner opens the FIFO; then the setup lives only in the runner.
printf '%s' "$setup" >"$state/.runner" &
unset setup
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin
mkdir -p "$work"
exec /usr/local/bin/gitea-runner -c "$state/config.yaml" daemon --once
