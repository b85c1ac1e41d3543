#!/bin/bash
# Makes the VM's Docker daemon answer with the configuration in /etc/docker/daemon.json: starts it,
# or, when it runs already, reloads it. Installed as /usr/local/bin/imp-start-dockerd and run by the
# entry point (run.sh), and linked as the image's template warm-up (/etc/imp/template-warm-up): a
# pool whose class starts from a memory snapshot has its node run it in the template VM before the
# save, so every VM restored from that snapshot finds dockerd answering instead of waiting ~12 s for
# it under emulation. The template has no network, setup or job; what the daemon may share across
# clones is in docs/snapshots.md.
#
# DOCKERD_INSECURE_REGISTRIES (comma-separated host:port, as run.sh wrote into daemon.json): a
# running daemon is reloaded (SIGHUP applies insecure-registries live) and each is waited for until
# `docker info` lists it. Writes /run/imp-docker-ready: how long the daemon took, and since the
# kernel started (for the job and the measurements).
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# until_docker WHAT COMMAND…: runs COMMAND until it succeeds, for at most 120 s (dockerd took 20 s to
# answer under emulation on a quiet machine, and a template starts it beside a booting VM). A
# deadline in seconds, not a count of tries: each `docker info` takes far longer than the pause.
until_docker() {
  local what=$1 deadline=$(($(date +%s) + 120))
  shift
  until "$@" >/dev/null 2>&1; do
    if (($(date +%s) >= deadline)); then
      echo "imp-start-dockerd: $what within 120 s:" >&2
      tail -n 30 /var/log/dockerd.log >&2
      exit 2
    fi
    sleep 0.1
  done
}
insecure() { docker info --format '{{json .RegistryConfig.IndexConfigs}}' | jq -e --arg r "$1" '.[$r].Secure == false'; }

started=$(date +%s%N)
pid=$(cat /var/run/docker.pid 2>/dev/null || true)
# The pid file's process, if it is dockerd (not whatever took a stale pid).
if [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]]; then
  # Started in this VM's template (or by an earlier run of this script).
  if [[ -n "${DOCKERD_INSECURE_REGISTRIES:-}" ]]; then
    # The reload is awaited in dockerd's log ("Reloaded configuration: …"), not by polling
    # `docker info`: under emulation each CLI call costs hundreds of ms. Then one look confirms it.
    reloads() { grep -c 'Reloaded configuration' /var/log/dockerd.log || true; }
    before=$(reloads)
    reloaded() { (($(reloads) > before)); }
    kill -HUP "$pid"
    until_docker "dockerd did not reload its configuration" reloaded
    for registry in ${DOCKERD_INSECURE_REGISTRIES//,/ }; do
      until_docker "dockerd did not take insecure registry $registry after its reload" insecure "$registry"
    done
  else
    until_docker "dockerd did not answer" docker info
  fi
  printf 'dockerd ready in 0 ms (already running, started in the template); reloaded in %s ms\n' "$((($(date +%s%N) - started) / 1000000))" | tee /run/imp-docker-ready >&2
  exit 0
fi
# Its own session, its output in a file: the daemon outlives this script (and the template's exec).
setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
until_docker "dockerd did not answer" docker info
ready_ms=$((($(date +%s%N) - started) / 1000000))
printf 'dockerd ready in %s ms; %s s after the kernel started\n' "$ready_ms" "$(cut -d' ' -f1 /proc/uptime)" | tee /run/imp-docker-ready >&2
