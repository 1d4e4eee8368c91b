#!/usr/bin/env bash
# A real single-node SLURM (slurmctld + slurmd on this host) for tests; Debian 12, run as root.
# Fakes one a100 and two h800 GPUs via GRES (File=/dev/null, /dev/zero, /dev/full) so `--gpus=a100:1` and
# `--gpus=h800:2` jobs schedule (a job whose GPU plan asks for two h800s: tests/test_slurm.py).

set -euo pipefail
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 2048 ))
if ! command -v slurmctld >/dev/null; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm >/dev/null
fi
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=localcluster
SlurmctldHost=${HOST}
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
SlurmdUser=root
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
# keep finished jobs visible to squeue for 10 min (snakemake uses squeue for status: no slurmdbd here)
MinJobAge=600
# preemption as a cluster does it: a job of the higher-tier partition urgent requeues the jobs in its way
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=${HOST} CPUs=${CPUS} RealMemory=${MEM_MB} Gres=gpu:a100:1,gpu:h800:2 State=UNKNOWN
PartitionName=cpu Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu_a100 Nodes=${HOST} MaxTime=INFINITE State=UP
PartitionName=gpu_h800 Nodes=${HOST} MaxTime=INFINITE State=UP
PartitionName=urgent Nodes=${HOST} MaxTime=INFINITE State=UP PriorityTier=10
CONF
cat > /etc/slurm/gres.conf <<CONF
AutoDetect=off
NodeName=${HOST} Name=gpu Type=a100 File=/dev/null
NodeName=${HOST} Name=gpu Type=h800 File=/dev/zero
NodeName=${HOST} Name=gpu Type=h800 File=/dev/full
CONF
chown munge:munge /run/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for i in $(seq 1 30); do sinfo -h -o '%T' 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo
