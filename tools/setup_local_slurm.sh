#!/usr/bin/env bash
# A real SLURM on this host for tests (slurmctld + slurmd); Debian 12, run as root.
# Node ${HOST} fakes two a100 and two h800 GPUs via GRES (File=/dev/null, /dev/urandom, /dev/zero,
# /dev/full) so `--gpus=a100:1` and `--gpus=h800:2` jobs schedule, two one-GPU jobs at once (a job
# whose GPU plan asks for two h800s: tests/test_slurm.py). Partition `twins` adds two more nodes, twin0 and twin1, each a slurmd of its
# own on this host (Debian's slurmd runs several, `slurmd -N <node>`) with one fake h800: a job of
# two nodes (tests/test_slurm.py's several-node training) runs one task on each.

set -euo pipefail
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 2048 ))
if ! command -v slurmctld >/dev/null; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm >/dev/null
fi
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd-${HOST} /var/spool/slurmd-twin0 \
  /var/spool/slurmd-twin1 /var/log/slurm /run/munge
# the twins' names resolve to this host (a several-node job's main address is its first node's name)
grep -q ' twin0 twin1$' /etc/hosts || echo '127.0.0.1 twin0 twin1' >> /etc/hosts
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=localcluster
SlurmctldHost=${HOST}
AuthType=auth/munge
# a requeued job waits out the credential lifetime before it starts again (120 s by default): the tests
# requeue jobs three times, and steps here launch within a second (SLURM's minimum is 5 s)
AuthInfo=cred_expire=10
CryptoType=crypto/munge
MpiDefault=none
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmdSpoolDir=/var/spool/slurmd-%n
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
SlurmdUser=root
SchedulerType=sched/backfill
# a requeued job, once eligible, waits for the next full pass (60 s and 30 s by default): one node, few jobs
SchedulerParameters=sched_interval=2,bf_interval=2
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
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
NodeName=${HOST} CPUs=${CPUS} RealMemory=${MEM_MB} Gres=gpu:a100:2,gpu:h800:2 State=UNKNOWN Port=6818
NodeName=twin[0-1] NodeHostname=${HOST} NodeAddr=127.0.0.1 CPUs=1 RealMemory=$(( MEM_MB / 2 )) Gres=gpu:h800:1 State=UNKNOWN Port=[6828-6829]
PartitionName=cpu Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu_a100 Nodes=${HOST} MaxTime=INFINITE State=UP
PartitionName=gpu_h800 Nodes=${HOST} MaxTime=INFINITE State=UP
PartitionName=twins Nodes=twin[0-1] MaxTime=INFINITE State=UP
PartitionName=urgent Nodes=${HOST} MaxTime=INFINITE State=UP PriorityTier=10
CONF
cat > /etc/slurm/gres.conf <<CONF
AutoDetect=off
NodeName=${HOST} Name=gpu Type=a100 File=/dev/null
NodeName=${HOST} Name=gpu Type=a100 File=/dev/urandom
NodeName=${HOST} Name=gpu Type=h800 File=/dev/zero
NodeName=${HOST} Name=gpu Type=h800 File=/dev/full
NodeName=twin[0-1] Name=gpu Type=h800 File=/dev/zero
CONF
chown munge:munge /run/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || { slurmd -N "${HOST}"; slurmd -N twin0; slurmd -N twin1; }
for i in $(seq 1 30); do [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c idle)" -ge 3 ] && break; sleep 1; done
sinfo
