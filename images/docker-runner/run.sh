#!/bin/bash
# The Docker runner VM's workload (the pool's runnerCommand), started as root by the guest agent:
# starts the job's own Docker daemon (start-dockerd.sh) unless the VM's template did, then runs the
# runner program as `runner` (uid 1001), which uses it through the docker group. The one-time setup
# arrives on stdin and goes straight to the runner (exec keeps stdin).
#
# dockerd is started here, by the image, rather than by the guest agent: the daemon is part of the
# job's userland (its version, its configuration, its registries are the image owner's), and an
# image without Docker pays nothing. The guest agent gives it what only the VM can: the kernel, the
# scratch disk's ext4 at /var/lib/docker, cgroup v2 and shared mount propagation.
#
# DOCKERD_INSECURE_REGISTRIES (comma-separated host:port, from the pool's runnerEnv) adds
# registries the daemon may pull from over plain HTTP (a registry on the node's network in tests).
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [[ -n "${DOCKERD_INSECURE_REGISTRIES:-}" ]]; then
  jq --arg r "$DOCKERD_INSECURE_REGISTRIES" '. + {"insecure-registries": ($r | split(","))}' /etc/docker/daemon.json >/run/daemon.json
  cp /run/daemon.json /etc/docker/daemon.json
fi
# Starts dockerd, or reloads the one this VM's template started (a VM restored from a memory snapshot).
imp-start-dockerd
# The runner's session as a login would give it on a hosted runner: its own runtime directory
# (where a runner program keeps what must not be on disk), and its output pipes, which the guest
# agent (root) created 0600, handed over so that `/dev/stdout` and `/dev/stderr` open as the runner.
install -d -m 0700 -o 1001 -g 1001 /run/user/1001
for fd in 1 2; do [[ -p /proc/self/fd/$fd ]] && chown 1001:1001 /proc/self/fd/$fd; done
export HOME=/home/runner USER=runner LOGNAME=runner XDG_RUNTIME_DIR=/run/user/1001
cd /home/runner
exec setpriv --reuid=1001 --regid=1001 --init-groups /runner/run.sh "$@"
