#!/bin/bash
# Starts the VM's Docker daemon unless it runs already, and waits until it answers (60 s cap).
# Installed as /usr/local/bin/imp-start-dockerd and run by the entry point (run.sh), and linked as
# the image's template warm-up (/etc/imp/template-warm-up): a pool whose class starts from a memory
# snapshot has its node run it in the template VM before the save, so every VM restored from that
# snapshot finds dockerd answering instead of waiting ~12 s for it under emulation. The template
# has no network, setup or job; what the daemon may share across clones is in docs/snapshots.md.
#
# Writes /run/imp-docker-ready: how long the daemon took, and since the kernel started (for the job
# and the measurements).
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [[ -s /var/run/docker.pid ]] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null && docker info >/dev/null 2>&1; then
  exit 0
fi
started=$(date +%s%N)
# Its own session, its output in a file: the daemon outlives this script (and the template's exec).
setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
# A deadline in seconds, not a count of tries: under emulation each `docker info` takes far longer
# than the pause between tries.
deadline=$(($(date +%s) + 60))
until docker info >/dev/null 2>&1; do
  if (($(date +%s) >= deadline)); then
    echo "imp-start-dockerd: dockerd did not answer within 60 s:" >&2
    tail -n 30 /var/log/dockerd.log >&2
    exit 2
  fi
  sleep 0.1
done
ready_ms=$((($(date +%s%N) - started) / 1000000))
printf 'dockerd ready in %s ms; %s s after the kernel started\n' "$ready_ms" "$(cut -d' ' -f1 /proc/uptime)" | tee /run/imp-docker-ready >&2
