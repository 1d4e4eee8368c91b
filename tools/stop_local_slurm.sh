#!/usr/bin/env bash
# Stop the daemons started by setup_local_slurm.sh (by pid; there is no systemd in containers).
for d in slurmd slurmctld; do pkill -x "$d" 2>/dev/null || true; done
pkill -x munged 2>/dev/null || true
exit 0
