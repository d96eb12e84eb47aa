#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for the slow tests and for trying hydra/launcher=slurm:
# Debian's slurm-wlm (slurmctld, slurmd, slurmdbd with a local MariaDB for sacct) and munge, started
# directly (no systemd, no cgroups) and stopped by PID.
#
#   bash tests/slurm/cluster.sh up       # as root: install (first time, ~50 s), configure, start; idempotent
#   bash tests/slurm/cluster.sh down     # stop every daemon it started
#   bash tests/slurm/cluster.sh status   # sinfo, or why not
#
# The node is this machine, its CPUs and memory as `slurmd -C` reads them, in one partition `debug`
# (default, no time limit). Accounting is on because submitit polls sacct: without it a job that died
# without writing its output is waited for forever. Writes /etc/slurm/{slurm,slurmdbd}.conf only where
# no other slurm.conf is there (a real cluster's node is never touched).
set -euo pipefail

STATE=/var/lib/ablate-slurm   # pid files, logs, spool folders
MARK="# written by ablate tests/slurm/cluster.sh"
CLUSTER=ablate
PARTITION=debug
DB_PASS=ablate-slurm-test     # the local MariaDB user slurmdbd writes with (socket only, test only)
DB_PID=/run/mysqld/ablate-slurm.pid

log() { echo "[slurm-cluster] $*"; }
die() { echo "[slurm-cluster] error: $*" >&2; exit 1; }

install_packages() {
    local need=()
    for bin in slurmctld slurmd slurmdbd sbatch munged mariadbd; do
        command -v "$bin" >/dev/null 2>&1 || need+=("$bin")
    done
    [ ${#need[@]} -eq 0 ] && return
    log "installing Debian packages (missing: ${need[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurmctld slurmd slurmdbd slurm-client munge mariadb-server >/dev/null
}

write_configs() {
    if [ -f /etc/slurm/slurm.conf ] && ! grep -qF "$MARK" /etc/slurm/slurm.conf; then
        die "/etc/slurm/slurm.conf exists and is not this script's: refusing to touch a real cluster's node"
    fi
    local node host
    node=$(slurmd -C | head -1)          # NodeName=<host> CPUs=.. Boards=.. ... RealMemory=..
    host=$(hostname -s)
    mkdir -p /etc/slurm "$STATE"/{ctld,d,log}
    chown slurm:slurm "$STATE/ctld"
    cat >/etc/slurm/slurm.conf <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
# a requeued job waits cred_expire seconds before it may start again (default 120 s; 10 keeps tests short)
AuthInfo=cred_expire=10
MinJobAge=300
SchedulerParameters=sched_interval=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    cat >/etc/slurm/slurmdbd.conf <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    chown slurm:slurm /etc/slurm/slurmdbd.conf
    chmod 600 /etc/slurm/slurmdbd.conf
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

wait_for() {  # wait_for <seconds> <what> <command...>
    local n=$1 what=$2; shift 2
    for _ in $(seq $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    die "$what did not come up within ${n} s (logs in $STATE/log)"
}

start_munge() {
    running /run/munge/munged.pid && return
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    wait_for 10 munged munge -n
}

start_mariadb() {
    if ! running "$DB_PID"; then
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        mariadbd --user=mysql --pid-file="$DB_PID" --skip-networking >"$STATE/log/mariadb.log" 2>&1 &
        wait_for 30 mariadb mariadb -e "select 1"
    fi
    mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

start_slurm() {
    running "$STATE/slurmdbd.pid" || slurmdbd
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
    running "$STATE/slurmctld.pid" || slurmctld
    running "$STATE/slurmd.pid" || slurmd
    wait_for 30 "the node" bash -c "sinfo -h -o %t | grep -qE '^(idle|mix|alloc)'"
}

up() {
    [ "$(id -u)" -eq 0 ] || die "needs root (installs Debian packages and starts daemons)"
    install_packages
    write_configs
    start_munge
    start_mariadb
    start_slurm
    log "up: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %t')"
}

down() {
    for pid in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" "$STATE/slurmdbd.pid" "$DB_PID" \
        /run/munge/munged.pid; do
        if running "$pid"; then
            kill "$(cat "$pid" 2>/dev/null)" 2>/dev/null || true
            for _ in $(seq 50); do running "$pid" || break; sleep 0.2; done
        fi
    done
    log "down"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) sinfo -h -o '%P %D node(s) %c CPUs %m MB %t' 2>&1 || exit 1 ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
