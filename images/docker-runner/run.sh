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
# dockerd may run already: in a VM restored from a memory snapshot, the template started it
# (start-dockerd.sh). The pool's registries then reach it by a reload (SIGHUP applies
# insecure-registries live), which is waited for like the daemon's start.
running=false
if [[ -s /var/run/docker.pid ]] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then running=true; fi
if [[ -n "${DOCKERD_INSECURE_REGISTRIES:-}" ]]; then
  jq --arg r "$DOCKERD_INSECURE_REGISTRIES" '. + {"insecure-registries": ($r | split(","))}' /etc/docker/daemon.json >/run/daemon.json
  cp /run/daemon.json /etc/docker/daemon.json
  if $running; then
    started=$(date +%s%N)
    kill -HUP "$(cat /var/run/docker.pid)"
    deadline=$(($(date +%s) + 60))
    for registry in ${DOCKERD_INSECURE_REGISTRIES//,/ }; do
      until docker info --format '{{json .RegistryConfig.IndexConfigs}}' 2>/dev/null | jq -e --arg r "$registry" '.[$r].Secure == false' >/dev/null; do
        if (($(date +%s) >= deadline)); then
          echo "run.sh: dockerd did not take insecure registry $registry within 60 s of its reload:" >&2
          tail -n 30 /var/log/dockerd.log >&2
          exit 2
        fi
        sleep 0.1
      done
    done
    printf 'dockerd started in the template; reloaded in %s ms\n' "$((($(date +%s%N) - started) / 1000000))" >&2
  fi
fi
if $running; then
  # What the job reads: the daemon came with the VM's snapshot.
  printf 'dockerd ready in 0 ms (started in the template); %s s after the template kernel started\n' "$(cut -d' ' -f1 /proc/uptime)" >/run/imp-docker-ready
else
  imp-start-dockerd
fi
# The runner's session as a login would give it on a hosted runner: its own runtime directory
# (where a runner program keeps what must not be on disk), and its output pipes, which the guest
# agent (root) created 0600, handed over so that `/dev/stdout` and `/dev/stderr` open as the runner.
install -d -m 0700 -o 1001 -g 1001 /run/user/1001
for fd in 1 2; do [[ -p /proc/self/fd/$fd ]] && chown 1001:1001 /proc/self/fd/$fd; done
export HOME=/home/runner USER=runner LOGNAME=runner XDG_RUNTIME_DIR=/run/user/1001
cd /home/runner
exec setpriv --reuid=1001 --regid=1001 --init-groups /runner/run.sh "$@"
