#!/usr/bin/env bash
# A one-node Slurm on this machine (Debian/Ubuntu, as root), to try the launcher's --slurm path for real:
# slurmctld and slurmd with munge, one partition "debug" holding this host's CPUs, no accounting (the launcher
# asks squeue, not sacct, which runs are still queued). tests/test_grid.py's Slurm test runs where `sinfo` answers.
#   bash benchmark/slurm/local_cluster.sh          # install (apt) if needed, configure, start
set -euo pipefail
if ! command -v slurmctld > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q slurm-wlm munge > /dev/null
fi
host="$(hostname -s)"
node="$(slurmd -C | head -1)"  # NodeName=<host> CPUs=.. Boards=.. ... RealMemory=..
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf << EOF
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
[[ -s /etc/munge/munge.key ]] || mungekey --create
chown -R munge:munge /etc/munge /run/munge /var/log/munge 2>/dev/null || true
pgrep -x munged > /dev/null || runuser -u munge -- munged
pgrep -x slurmctld > /dev/null || slurmctld
pgrep -x slurmd > /dev/null || slurmd
for _ in $(seq 30); do
    sinfo --noheader --states idle,mixed,allocated 2> /dev/null | grep -q . && { sinfo; exit 0; }
    sleep 1
done
echo "local_cluster.sh: Slurm did not come up (see /var/log/slurm/)" >&2
exit 1
